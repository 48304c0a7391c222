package bpf

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/kprofd/kprofd/internal/wire"
)

// TestEventLayout checks bpf.Event against struct kprofd_event as bpf2go
// generated it from the BPF object's BTF.
func TestEventLayout(t *testing.T) {
	var gen kprofdKprofdEvent
	var ev wire.Event
	if unsafe.Sizeof(gen) != unsafe.Sizeof(ev) {
		t.Fatalf("Event is %d bytes, kprofd_event %d", unsafe.Sizeof(ev), unsafe.Sizeof(gen))
	}
	gt, et := reflect.TypeOf(gen), reflect.TypeOf(ev)
	for _, name := range []string{"Time", "Slot", "Tid", "Func", "Kind", "Flags", "Adjust"} {
		gf, _ := gt.FieldByName(name)
		ef, ok := et.FieldByName(name)
		if !ok || gf.Offset != ef.Offset || gf.Type.Size() != ef.Type.Size() {
			t.Errorf("field %s: Event offset %d size %d, kprofd_event offset %d size %d", name, ef.Offset, ef.Type.Size(), gf.Offset, gf.Type.Size())
		}
	}
}

func TestAppendEvents(t *testing.T) {
	evs := []wire.Event{{Time: 1, Slot: 2, Tid: 3, Func: 4, Kind: wire.KindExit, Flags: wire.FlagLostBefore, Adjust: 6}, {Time: 5}}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&evs[0])), len(evs)*int(unsafe.Sizeof(wire.Event{})))
	got, err := appendEvents(nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, evs) {
		t.Errorf("decoded %+v, want %+v", got, evs)
	}
	if _, err := appendEvents(nil, raw[:40]); err == nil {
		t.Error("accepted a record that is not a whole number of events")
	}
}
