package dra

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration is what the kubelet last said of the driver's
// registration. The library keeps that too (Helper.RegistrationStatus),
// but writes it from its gRPC handler without a lock, so it is read here
// from the call itself, by an interceptor of the plugin's gRPC servers.
type registration struct {
	mu       sync.Mutex
	answered bool
	ok       bool
	reason   string
}

// observe is a grpc.UnaryServerInterceptor: it records the kubelet's
// NotifyRegistrationStatus and passes every call on.
func (r *registration) observe(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if st, ok := req.(*registerapi.RegistrationStatus); ok {
		r.mu.Lock()
		r.answered, r.ok, r.reason = true, st.PluginRegistered, st.Error
		r.mu.Unlock()
	}
	return handler(ctx, req)
}

// err is nil once the kubelet said the driver is registered.
func (r *registration) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.answered:
		return fmt.Errorf("%w: the kubelet has not answered its registration", ErrNotRegistered)
	case !r.ok:
		return fmt.Errorf("%w: %s", ErrNotRegistered, r.reason)
	}
	return nil
}
