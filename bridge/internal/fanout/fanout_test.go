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

// A keyed Notify reaches the receivers of its keys only, and a key whose
// last receiver stopped is forgotten.
func TestKeyed(t *testing.T) {
	var k Keyed
	a, stopA := k.Subscribe("a")
	a2, stopA2 := k.Subscribe("a")
	b, stopB := k.Subscribe("b")
	defer stopB()
	k.Notify("a", "c")
	for name, ch := range map[string]<-chan struct{}{"a": a, "a2": a2} {
		select {
		case <-ch:
		default:
			t.Fatalf("%s heard nothing", name)
		}
	}
	select {
	case <-b:
		t.Fatal("b was signalled by a Notify of a and c")
	default:
	}
	stopA()
	if k.Len("a") != 1 {
		t.Fatalf("Len(a) = %d after one of two stopped", k.Len("a"))
	}
	stopA2()
	if k.Len("a") != 0 || len(k.subs) != 1 {
		t.Fatalf("after both receivers of a stopped: Len(a) = %d, keys %v", k.Len("a"), k.subs)
	}
	// A receiver that subscribes again after its key was forgotten hears
	// the next Notify.
	a3, stopA3 := k.Subscribe("a")
	defer stopA3()
	k.Notify("a")
	select {
	case <-a3:
	default:
		t.Fatal("a new receiver of a forgotten key heard nothing")
	}
}
