package defaults

import (
	"testing"

	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

// The kubelet/Pod vector of the Rust SDK's defaults tests (from client-go's tests).
func kubeletPod() eventpipe.KeyEvent {
	var e eventpipe.KeyEvent
	e.Source.Component, e.Source.Host = "kubelet", "kublet.node1"
	o := &e.InvolvedObject
	o.Kind, o.Namespace, o.Name, o.FieldPath, o.UID, o.APIVersion =
		"Pod", "other", "pod1", "spec.containers{mycontainer}", "C934D34AFB20242", "version"
	e.Type, e.Reason, e.Message = "Normal", "end-of-world", "it was fun"
	return e
}

func key(f func(*eventpipe.KeyEvent, eventpipe.KeyWriter), e eventpipe.KeyEvent) string {
	var b []byte
	f(&e, wit.NewKeyWriter(&b))
	return string(b)
}

func TestClientGoVectors(t *testing.T) {
	e := kubeletPod()
	for _, c := range []struct {
		name string
		f    func(*eventpipe.KeyEvent, eventpipe.KeyWriter)
		want string
	}{
		{"EventKey", EventKey, "kubeletkublet.node1Podotherpod1spec.containers{mycontainer}C934D34AFB20242versionNormalend-of-worldit was fun"},
		{"SpamKeyWithType", SpamKeyWithType, "kubeletkublet.node1Podotherpod1C934D34AFB20242versionNormal"},
		{"SpamKey", SpamKey, "kubeletkublet.node1Podotherpod1C934D34AFB20242version"},
		{"AggregateByReason", AggregateByReason, "kubeletkublet.node1Podotherpod1C934D34AFB20242versionNormalend-of-world"},
		{"AggregateByReasonLocal", AggregateByReasonLocal, "it was fun"},
		{"AggregateByReasonMessage", AggregateByReasonMessage, "(combined from similar events): it was fun"},
	} {
		if got := key(c.f, e); got != c.want {
			t.Errorf("%s = %q, want %q", c.name, got, c.want)
		}
	}
	e.ReportingComponent, e.ReportingInstance = "kubelet-rc", "i-1"
	if got := key(AggregateByReason, e); got[len(got)-len("end-of-worldkubelet-rci-1"):] != "end-of-worldkubelet-rci-1" {
		t.Errorf("reporting fields: %q", got)
	}
}
