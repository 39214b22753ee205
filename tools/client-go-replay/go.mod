module eventpipe.dev/tools/client-go-replay

go 1.24

require (
	k8s.io/api v0.26.15
	k8s.io/client-go v0.26.15
)
