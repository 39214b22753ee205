module github.com/eventpipe/eventpipe/examples/plugins/go

go 1.24

require github.com/eventpipe/eventpipe/guest-sdk/go v0.0.0

replace github.com/eventpipe/eventpipe/guest-sdk/go => ../../../guest-sdk/go
