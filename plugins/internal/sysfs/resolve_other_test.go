//go:build !linux

package sysfs

import "io/fs"

// withoutKernelResolve returns fsys: only Linux resolves in the kernel.
func withoutKernelResolve(fsys fs.FS) fs.FS { return fsys }
