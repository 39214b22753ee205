module github.com/eventpipe/eventpipe/guest-sdk/go

go 1.24
