//go:build !linux

package sysfs

// kernelRoot is empty where the kernel has no openat2.
type kernelRoot struct{}

// resolveInKernel leaves every resolution to user space: only Linux
// resolves in a root.
func (h *hostFS) resolveInKernel(string) (string, error) { return "", errNoKernelResolve }
