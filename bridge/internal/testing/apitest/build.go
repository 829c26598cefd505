package apitest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// The kube-apiserver's sources: the e2e module, found by walking up from
// the working directory (a test's is its package's directory, in either
// module), and the main package in it.
const (
	e2eModule      = "bridge/e2e"
	apiserverMain  = "cmd/kube-apiserver"
	binaryPrefix   = "kube-apiserver-"
	cacheSubdir    = "cdi-apitest"
	lockRetryDelay = 500 * time.Millisecond
)

// ErrUnavailable is wrapped by Run's errors when a program the server
// needs (etcd, the Go toolchain) is not installed.
var ErrUnavailable = errors.New("test API server unavailable")

// findE2E returns the e2e module's directory.
func findE2E() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, e2eModule)
		if _, err := os.Stat(filepath.Join(candidate, apiserverMain, "main.go")); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no %s/%s above the working directory", ErrUnavailable, e2eModule, apiserverMain)
		}
		dir = parent
	}
}

// sourceKey names a build of the kube-apiserver by what decides its
// contents: the e2e module's requirements, its main.go and the Go release.
func sourceKey(e2e string) (string, error) {
	h := sha256.New()
	h.Write([]byte(runtime.Version()))
	for _, name := range []string{"go.mod", "go.sum", filepath.Join(apiserverMain, "main.go")} {
		data, err := os.ReadFile(filepath.Join(e2e, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\x00%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// cacheDir is where built binaries are kept between runs.
func cacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, cacheSubdir)
}

// apiserverBinary returns a kube-apiserver built from the e2e module,
// building it (output to logPath) unless the cache holds one from the
// same sources. built is how long the build took, zero when reused.
func apiserverBinary(ctx context.Context, logPath string) (bin string, built time.Duration, err error) {
	e2e, err := findE2E()
	if err != nil {
		return "", 0, err
	}
	key, err := sourceKey(e2e)
	if err != nil {
		return "", 0, fmt.Errorf("kube-apiserver sources: %w", err)
	}
	dir := cacheDir()
	bin = filepath.Join(dir, binaryPrefix+key)
	if isFile(bin) {
		return bin, 0, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", 0, fmt.Errorf("%w: building kube-apiserver needs the Go toolchain: %w", ErrUnavailable, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	// Test binaries of several packages start at once: one builds, the
	// others wait and then find its binary.
	lock := flock.New(filepath.Join(dir, "build.lock"))
	if _, err := lock.TryLockContext(ctx, lockRetryDelay); err != nil {
		return "", 0, fmt.Errorf("locking %s: %w", dir, err)
	}
	defer lock.Unlock()
	if isFile(bin) {
		return bin, 0, nil
	}
	start := time.Now()
	if err := goBuild(ctx, goTool, e2e, bin, logPath); err != nil {
		return "", 0, err
	}
	pruneOtherBuilds(dir, bin)
	return bin, time.Since(start), nil
}

// goBuild builds the kube-apiserver into bin by way of a temporary file,
// so that bin exists only once it is complete.
func goBuild(ctx context.Context, goTool, e2e, bin, logPath string) error {
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmp, "./"+apiserverMain)
	cmd.Dir = e2e
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("building kube-apiserver in %s (output in %s): %w", e2e, logPath, err)
	}
	return os.Rename(tmp, bin)
}

// pruneOtherBuilds removes binaries built from earlier sources: each is
// about a hundred megabytes.
func pruneOtherBuilds(dir, keep string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), binaryPrefix) && path != keep {
			os.Remove(path)
		}
	}
}

func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

// lookEtcd finds the etcd program: name if set, else etcd on the PATH.
func lookEtcd(name string) (string, error) {
	if name == "" {
		name = "etcd"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: %w (install Debian's etcd-server: apt-get install etcd-server)", ErrUnavailable, err)
		}
		return "", err
	}
	return path, nil
}
