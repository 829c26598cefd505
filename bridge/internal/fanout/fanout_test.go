package fanout

import "testing"

// Every receiver hears a Notify, signals coalesce while one is pending,
// and a stopped receiver hears nothing more.
func TestFanout(t *testing.T) {
	var f Fanout
	a, stopA := f.Subscribe()
	b, stopB := f.Subscribe()
	defer stopB()
	f.Notify()
	f.Notify() // coalesced with the first
	for name, ch := range map[string]<-chan struct{}{"a": a, "b": b} {
		select {
		case <-ch:
		default:
			t.Fatalf("%s heard nothing", name)
		}
		select {
		case <-ch:
			t.Fatalf("%s heard two signals for two Notifies in a row", name)
		default:
		}
	}
	stopA()
	if f.Len() != 1 {
		t.Fatalf("Len = %d after one of two stopped", f.Len())
	}
	f.Notify()
	select {
	case <-a:
		t.Fatal("a stopped receiver was signalled")
	default:
	}
}
