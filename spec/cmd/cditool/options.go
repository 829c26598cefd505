package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/cdiexec/cdi/spec/invoke"
)

// options are the parsed flags.
type options struct {
	confDir    string
	path       string
	conf       string
	cdiVersion string
	json       bool
	all        bool
	timeout    time.Duration
	numa       string
	devices    string
	version    bool
	// set holds the names of the flags given on the command line.
	set map[string]bool
}

func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cditool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // run prints help or a hint itself
	fs.StringVar(&o.confDir, "conf-dir", invoke.DefaultConfDir, "`directory` holding the <type>.d drop-in folders")
	fs.StringVar(&o.path, "path", invoke.DefaultPluginDir, "colon-separated `directories` searched for plugin binaries")
	fs.StringVar(&o.conf, "conf", "", "run only the drop-in of this `name`")
	fs.BoolVar(&o.json, "json", false, "print the plugins' JSON documents unchanged")
	fs.DurationVar(&o.timeout, "timeout", invoke.DefaultTimeout, "kill a plugin run that takes longer than `duration`")
	fs.StringVar(&o.numa, "numa", "", "add: NUMA `nodes` to allocate near, e.g. 0,1 (CDI_REQUEST_NUMA_LOCALITY)")
	fs.StringVar(&o.devices, "devices", "", "add: pin the allocation to these device `ids` (CDI_REQUEST_DEVICES, protocol 0.1.0)")
	fs.BoolVar(&o.all, "all", false, "gc: nothing is valid, release every allocation of the type")
	fs.StringVar(&o.cdiVersion, "cdi-version", "", "send this CDI_VERSION instead of negotiating one with the plugin")
	fs.BoolVar(&o.version, "version", false, "print cditool's build and exit")
	return fs
}

// errFlags stands for an error the flag package has already printed.
var errFlags = errors.New("bad flags")

// parseArgs parses flags wherever they appear among the positional
// arguments, which the flag package alone stops at, and returns the
// positional ones in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errFlags
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseOptions parses the command line into options and positional arguments.
func parseOptions(args []string, stderr io.Writer) (*options, *flag.FlagSet, []string, error) {
	o := &options{set: map[string]bool{}}
	fs := newFlagSet(o, stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, fs, nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.timeout <= 0 {
		return nil, fs, nil, fmt.Errorf("--timeout must be positive, not %v", o.timeout)
	}
	if len(invoke.SplitPath(o.path)) == 0 {
		return nil, fs, nil, fmt.Errorf("--path is empty")
	}
	return o, fs, pos, nil
}
