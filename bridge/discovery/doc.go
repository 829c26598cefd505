// Package discovery finds what the node's CDI plugins offer: it loads every
// drop-in, runs INFO and groups the devices into pools, one per drop-in and
// resource-spec. The bridge turns each pool into a Configuration-level
// resource and each device into an Instance.
//
// Every call of a plugin is made in the newest protocol version both the
// bridge and the plugin speak, which must be 0.1.0 (the device inventory)
// or newer: a plugin of an older one is a Skip that says so. VERSION runs
// once per plugin binary (invoke.VersionCache), not before every INFO, and
// again when the file at the binary's path changes (a plugin upgraded on
// the host) or the plugin refuses the version with code 1. A plugin of
// 0.1.0 alone is served as one of 0.2.0, without skipped_devices.
//
// Discovery runs at start, on a period, whenever the drop-in folder
// changes, and, with a Watcher (inotify through fsnotify in the bridge),
// whenever a device directory changes: <root>/dev of every drop-in's root
// arg and each directory its devices' nodes live in (/dev/dri, /dev/snd).
// A device event runs INFO for the drop-ins that look in that directory
// only, after Debounce of quiet, so that the burst of events udev makes
// for a device, or for a hub of them, is one INFO per drop-in. The period
// stays: it is how network endpoints, whose drop-ins are not watched, and
// a directory that cannot be watched (too many watches, gone, a link out
// of the drop-in's root, which inotify would follow) are rediscovered;
// such a directory is logged once. Each discovery checks that every
// watched directory is still the one watched (its device and inode): one
// replaced since, by a link and back say, of which the watch hears
// nothing, is watched anew, and logged.
//
// A plugin that fails INFO does not make its devices vanish (that would
// withdraw resources from the kubelet on a transient error): they are
// kept from the previous run and reported unhealthy until INFO succeeds,
// and the drop-in is a Skip meanwhile, as one that does not load: a
// plugin that refuses its drop-in (a misspelt args member is code 15) is
// on /readyz. What a plugin writes on stderr is logged at debug, at most
// MaxStderrLogged bytes a run; the devices it skipped (SPEC.md's
// skipped_devices) are counted by drop-in and reason (SkippedDevices) and
// logged at info when they change.
// A device that INFO no longer lists is logged once as vanished and goes,
// unless Keep says a container holds it: it then stays among its pool's
// devices, unhealthy, so that its Instance, its CDI name and its slots
// stay, until Keep lets it go or INFO lists it again under the same id,
// healthy. A device's id must therefore stay the same across unplug and
// replug (SPEC.md, Section 8).
//
// What a discovery finds wrong (drop-ins that do not load, a plugin
// missing or its INFO failing, devices that cannot be served, two drop-ins
// of one pool name) is logged once per distinct cause, again only every
// ten minutes while it lasts (bridge/internal/logrepeat), and once when it
// is mended: device events discover many times a minute.
package discovery
