// Package reclaim gives back the slots that no container uses any more.
//
// A slot is claimed at Allocate, but nothing tells a device plugin when
// the container that got it goes away. The kubelet's PodResources API
// does say which device ids running containers hold, so every period the
// Reclaimer compares that with the slots this node claims in the Instance
// store: a claimed slot that no container has held for longer than a
// grace period is released (DEL on the plugin that set it up, then the
// store), and each plugin is told, with GC, which of its allocations are
// still valid. A slot that reappears within the grace is kept: the
// kubelet lists a pod's devices from admission on, but a restart of the
// kubelet may hide them for a moment.
//
// The grace is for what the kubelet does not report, not for a pod known
// gone. The Tracker remembers the pod that last held each slot; between
// passes, Run asks the kubelet every HolderEvery which pods run, and the
// API server (PodEnded) whether one that held slots and is no longer
// listed has ended. If it has (deleted, Succeeded, Failed), a pass
// follows at once and releases its slots without the grace.
//
// A plugin's allocations that no slot of this node names are another
// front end's (a DRA claim's, its pool moved to the device plugins under
// a running pod) or another caller's: GC keeps them while a container
// holds them (Reclaimer.OthersHeld, from the claims' CDI names the
// kubelet lists) and for the grace after (Foreign), and their devices are
// not offered meanwhile (Plugins.HeldElsewhere).
package reclaim
