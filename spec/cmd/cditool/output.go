package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdiexec/cdi/spec"
)

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func row(w io.Writer, cells ...string) { fmt.Fprintln(w, strings.Join(cells, "\t")) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printVersion(w io.Writer, v *spec.VersionResult, negotiated string, forced bool) {
	t := table(w)
	row(t, "cdiVersion:", v.CDIVersion)
	row(t, "supportedVersions:", strings.Join(v.SupportedVersions, ", "))
	switch {
	case forced:
		negotiated += " (forced by --cdi-version)"
	case negotiated == "":
		negotiated = "none: cditool speaks " + strings.Join(spec.SupportedVersions(), ", ")
	}
	row(t, "negotiated:", negotiated)
	t.Flush()
}

// printInfo prints INFO's counts, which are usage slots of healthy
// devices (SPEC.md), not devices, as the header says; then the inventory.
func printInfo(w io.Writer, r *spec.InfoResult) {
	t := table(w)
	row(t, "RESOURCE", "SLOTS (healthy devices x capacity)")
	for _, k := range r.SortedSpecs() {
		row(t, k, strconv.Itoa(r.Counts[k]))
	}
	t.Flush()
	if r.Devices == nil {
		return // 0.0.x: no inventory
	}
	fmt.Fprintln(w)
	if len(r.Devices) == 0 {
		fmt.Fprintln(w, "(no devices in the inventory)")
		return
	}
	t = table(w)
	row(t, "ID", "RESOURCE", "NODES", "NUMA", "HEALTHY", "USED", "CAPACITY", "SHARED")
	for _, d := range r.Devices {
		numa := "-"
		if d.NUMANode != nil {
			numa = strconv.Itoa(*d.NUMANode)
		}
		row(t, d.ID, d.Resource, orDash(nodePaths(d.DeviceNodes)), numa, yesNo(d.Healthy),
			strconv.Itoa(d.Used), strconv.Itoa(d.Capacity), yesNo(d.Shared))
	}
	t.Flush()
}

func nodePaths(nodes []spec.DeviceNode) string {
	paths := make([]string, len(nodes))
	for i, n := range nodes {
		paths[i] = n.HostPath
	}
	return strings.Join(paths, ",")
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func printAdd(w io.Writer, id string, r *spec.AddResult) {
	t := table(w)
	row(t, "request-id:", id)
	row(t, "devices:", orDash(strings.Join(r.Devices, ", ")))
	if len(r.NUMALocality) > 0 {
		row(t, "numa:", joinInts(r.NUMALocality))
	}
	t.Flush()
	if len(r.DeviceNodes) > 0 {
		t = section(w, "DEVICE NODE", "CONTAINER PATH", "PERMISSIONS")
		for _, n := range r.DeviceNodes {
			row(t, n.HostPath, orDash(n.ContainerPath), orDash(n.Permissions))
		}
		t.Flush()
	}
	printMap(w, "ENV", r.Env)
	if len(r.Mounts) > 0 {
		t = section(w, "MOUNT", "CONTAINER PATH", "READ-ONLY")
		for _, m := range r.Mounts {
			row(t, m.HostPath, m.ContainerPath, yesNo(m.ReadOnly))
		}
		t.Flush()
	}
	printMap(w, "ANNOTATIONS", r.Annotations)
	if len(r.CDIDevices) > 0 {
		fmt.Fprintf(w, "\nCDI DEVICES\n%s\n", strings.Join(r.CDIDevices, "\n"))
	}
	if len(r.Units) > 0 {
		t = section(w, "UNIT RESOURCE", "DEVICE", "SLOT")
		for _, u := range r.Units {
			row(t, u.Resource, u.Device, strconv.Itoa(u.Slot))
		}
		t.Flush()
	}
}

// section starts a table after a blank line.
func section(w io.Writer, header ...string) *tabwriter.Writer {
	fmt.Fprintln(w)
	t := table(w)
	row(t, header...)
	return t
}

// printMap prints a titled KEY=value list, sorted by key.
func printMap(w io.Writer, title string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "\n%s\n", title)
	for _, k := range keys {
		fmt.Fprintf(w, "%s=%s\n", k, m[k])
	}
}

func printList(w io.Writer, r *spec.ListResult) {
	if len(r.Allocations) == 0 {
		fmt.Fprintln(w, "(no allocations)")
		return
	}
	t := table(w)
	row(t, "REQUEST-ID", "REQUEST", "CREATED", "DEVICES")
	for _, a := range r.Allocations {
		devices := a.Result.Devices
		if len(devices) == 0 {
			devices = a.Result.CDIDevices // e.g. network endpoints, which have no nodes
		}
		row(t, a.RequestID, a.Request, a.Created.UTC().Format(time.RFC3339), orDash(strings.Join(devices, ",")))
	}
	t.Flush()
}

func printGC(w io.Writer, r *spec.GCResult) {
	if len(r.Released) == 0 {
		fmt.Fprintln(w, "released nothing")
		return
	}
	fmt.Fprintf(w, "released %d allocation(s): %s\n", len(r.Released), strings.Join(r.Released, ", "))
}
