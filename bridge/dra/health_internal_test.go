package dra

import (
	"context"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// recvWait bounds a wait for a report that must come.
const recvWait = 30 * time.Second

// A stream sends nothing before the first report, then the newest
// complete list at once, again at every change, and again each resend
// period when nothing changed; it ends with its context.
func TestHealthFeedWatch(t *testing.T) {
	feed := newHealthFeed()
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	const resend = 50 * time.Millisecond
	go func() { done <- feed.watch(ctx, reports, resend) }()

	select {
	case r := <-reports:
		t.Fatalf("a report %+v before the driver reported any", r)
	case <-time.After(3 * resend):
	}
	checked := time.Unix(1700000000, 0)
	feed.set([]DeviceHealth{{Pool: "n/tty-generic", Name: "tty41", Health: Healthy, Checked: checked},
		{Pool: "n/tty-generic", Name: "tty42", Health: Unhealthy, Message: "vanished", Checked: checked},
		{Pool: "n/tty-generic", Name: "tty43", Health: Unknown, Message: "INFO failed", Checked: checked}})
	want := []kubeletplugin.DeviceHealth{
		{PoolName: "n/tty-generic", DeviceName: "tty41", Health: kubeletplugin.HealthStatusHealthy, LastUpdated: checked, HealthCheckTimeout: HealthTimeout},
		{PoolName: "n/tty-generic", DeviceName: "tty42", Health: kubeletplugin.HealthStatusUnhealthy, LastUpdated: checked, HealthCheckTimeout: HealthTimeout, Message: "vanished"},
		{PoolName: "n/tty-generic", DeviceName: "tty43", Health: kubeletplugin.HealthStatusUnknown, LastUpdated: checked, HealthCheckTimeout: HealthTimeout, Message: "INFO failed"},
	}
	for i := range 3 { // the report, then two resends of it
		if got := receive(t, reports).Devices; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("report %d: %+v, want %+v", i, got, want)
		}
	}
	feed.set([]DeviceHealth{{Pool: "n/tty-generic", Name: "tty41", Health: Healthy}})
	// A resend of the old list may be under way as the list changes.
	var got []kubeletplugin.DeviceHealth
	for range 2 {
		if got = receive(t, reports).Devices; len(got) == 1 {
			break
		}
	}
	if len(got) != 1 || got[0].DeviceName != "tty41" {
		t.Errorf("after the change: %+v, want tty41 alone", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
}

func receive(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport) kubeletplugin.DeviceHealthReport {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(recvWait):
		t.Fatal("no report")
		return kubeletplugin.DeviceHealthReport{}
	}
}
