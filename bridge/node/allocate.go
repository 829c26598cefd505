package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// grant is one slot an Allocate call sets up.
type grant struct {
	Claim instance.Claim
	// VDev is the Configuration-level virtual device; "" for Instance-level.
	VDev string
	// Held says the slot was this node's before the call (a vdev requested
	// again): a failure of the call must not release or delete it.
	Held     bool
	Plugin   *invoke.Plugin
	Resource string // resource-spec to request, e.g. "gpu"
	DeviceID string // pinned with CDI_REQUEST_DEVICES
	// CDI is the device as a spec file the bridge wrote names it, nil when
	// none does. Only such a name reaches the response: the cdiDevices of
	// the plugin's result name specs that the runtime may not have.
	CDI *cdiDevice
}

// allocator claims and sets up slots.
type allocator struct {
	Store instance.Store
	// Timeout bounds each ADD: the kubelet gives Allocate none of its own.
	Timeout time.Duration
	// Prefix is the slot annotation's prefix (the resource domain).
	Prefix string
	Logger *slog.Logger
}

// Allocate claims every grant of the call at once, then runs ADD for each,
// container by container. It is all or nothing: on any failure the
// grants already added are deleted and every claim of the call released.
// The first ADD's process starts while the claim is written and gets its
// input only once the claim holds (invoke.Plugin.AddAfter): the store is
// still the truth before any plugin acts, and the plugin's start-up is
// not added to the claim's time.
func (a *allocator) Allocate(ctx context.Context, containers [][]grant) (*pluginapi.AllocateResponse, error) {
	var claims []instance.Claim
	var grants []grant
	for _, c := range containers {
		for _, g := range c {
			claims = append(claims, g.Claim)
			grants = append(grants, g)
		}
	}
	if len(grants) == 0 {
		return &pluginapi.AllocateResponse{}, nil
	}
	claimed := make(chan error, 1)
	first := a.startAdd(ctx, grants[0], claimed)
	err := a.Store.Claim(ctx, claims)
	claimed <- err
	if err != nil {
		<-first // the plugin stopped, unread
		if errors.Is(err, instance.ErrUnknownOutcome) {
			go a.settle(fresh(containers))
		}
		return nil, fmt.Errorf("claiming slots: %w", err)
	}
	resp := &pluginapi.AllocateResponse{}
	var added []grant
	for i, c := range containers {
		cr := newContainerResponse()
		for j, g := range c {
			var r addOutcome
			if i == 0 && j == 0 {
				r = <-first
			} else {
				r.result, r.err = a.add(ctx, g)
			}
			if r.err != nil {
				// g's ADD may have committed before it failed (a timeout
				// after the plugin wrote its state): DEL it too, which is
				// harmless if it did not.
				a.undo(append(added, g), containers)
				return nil, r.err
			}
			added = append(added, g)
			cr.add(r.result, g.CDI, a.Prefix, g.Claim.Slot, g.VDev)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &cr.ContainerAllocateResponse)
	}
	return resp, nil
}

// addOutcome is what one ADD returned.
type addOutcome struct {
	result *spec.AddResult
	err    error
}

// startAdd runs g's ADD in the background, its input held back until
// ready yields nil (invoke.Plugin.AddAfter).
func (a *allocator) startAdd(ctx context.Context, g grant, ready <-chan error) <-chan addOutcome {
	out := make(chan addOutcome, 1)
	go func() {
		r, err := a.addWith(ctx, g, func(ctx context.Context, req invoke.AddRequest) (*spec.AddResult, error) {
			return g.Plugin.AddAfter(ctx, req, ready)
		})
		out <- addOutcome{r, err}
	}()
	return out
}

func (a *allocator) add(ctx context.Context, g grant) (*spec.AddResult, error) {
	return a.addWith(ctx, g, g.Plugin.Add)
}

// addWith runs g's ADD through run, under the allocator's timeout.
func (a *allocator) addWith(ctx context.Context, g grant, run func(context.Context, invoke.AddRequest) (*spec.AddResult, error)) (*spec.AddResult, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	req, err := spec.ParseRequest(g.Resource + ":1")
	if err != nil {
		return nil, err
	}
	r, err := run(ctx, invoke.AddRequest{Request: req, RequestID: g.Claim.Slot, Devices: []string{g.DeviceID}})
	if err != nil {
		return nil, fmt.Errorf("ADD of slot %s (device %s): %w", g.Claim.Slot, g.DeviceID, err)
	}
	return r, nil
}

// fresh is the claims of the grants that were not held before the call.
func fresh(containers [][]grant) []instance.Claim {
	var out []instance.Claim
	for _, c := range containers {
		for _, g := range c {
			if !g.Held {
				out = append(out, g.Claim)
			}
		}
	}
	return out
}

// settle releases claims whose write had an unknown outcome (the store
// may hold them though the call failed), retrying until the store answers
// or settleFor has passed; reclaim frees what is still held after that.
// Release frees only slots that hold exactly a claim's value, so releasing
// a claim that was never recorded changes nothing.
func (a *allocator) settle(claims []instance.Claim) {
	start, wait := time.Now(), 100*time.Millisecond
	for time.Since(start) < settleFor {
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout())
		err := a.Store.Release(ctx, claims)
		cancel()
		if err == nil {
			a.log().Info("released the claims of an Allocate whose writes had an unknown outcome",
				"claims", len(claims), "took", time.Since(start).Round(time.Millisecond).String())
			return
		}
		a.log().Warn("releasing the claims of an Allocate whose writes had an unknown outcome; trying again", "error", err, "in", wait.String())
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
	a.log().Error("gave up releasing the claims of an Allocate whose writes had an unknown outcome; slot reclaim will", "claims", claims)
}

// settleFor bounds settle's retries.
const settleFor = 10 * time.Minute

// undo deletes what the call added, or may have added, and releases what
// it claimed, leaving the slots that were held before the call alone. It runs on a fresh
// context: the caller's may be the reason for the failure.
func (a *allocator) undo(added []grant, containers [][]grant) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout())
	defer cancel()
	for _, g := range added {
		if g.Held {
			continue
		}
		var e *spec.Error
		if err := g.Plugin.Del(ctx, g.Claim.Slot); err != nil && !(errors.As(err, &e) && e.Code == spec.CodeUnknownRequestID) {
			a.log().Warn("DEL after a failed Allocate; the plugin's GC will release it", "slot", g.Claim.Slot, "error", err)
		}
	}
	if err := a.Store.Release(ctx, fresh(containers)); err != nil {
		a.log().Error("releasing the claims of a failed Allocate; trying again in the background", "error", err)
		go a.settle(fresh(containers))
	}
}

func (a *allocator) log() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

func (a *allocator) timeout() time.Duration {
	if a.Timeout > 0 {
		return a.Timeout
	}
	return 30 * time.Second
}
