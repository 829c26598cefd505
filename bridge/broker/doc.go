// Package broker deploys, for the devices the bridge discovers, the
// workloads that use them: what Akri calls brokers, and its proposal
// "Infrastructure for Multiple Deployment Strategies" describes. A Broker
// (a custom resource of ours, bridge/deploy/crd/brokers.yaml) names a
// pool, optionally which of its devices (by id and property), and a Job
// or Deployment template; the Controller makes ordinary Jobs and
// Deployments that request the devices, and the scheduler places them on
// a node that has them. Nothing here schedules.
//
// Strategies. PerDevice is one workload per selected device, requesting
// that device: its Instance-level resource (<domain>/<Instance name>, one
// slot per container) in a pool served by device plugins; in a pool
// served through DRA, a ResourceClaimTemplate of the workload's that
// selects the device by its pool and id attributes (a device only one node
// sees also pins the pods to that node by node affinity, since a local
// device's id is not unique in the cluster). A Deployment's replicas are
// at most the device's slots divided by a pod's containers (through DRA,
// the slots: a pod's containers share its claim). Pool is one workload over Count devices
// of the pool: Count of its Configuration-level resource, or a claim of
// Count devices the Broker's selector picks. Optional Services: one per
// device's workload and one over all of the Broker's.
//
// Which devices exist is read where the bridge records them: the
// Instances of the leader's store of every pool for the pools served by
// device plugins, a device being there while some node sees it and some
// such node has it healthy (its Nodes' allocatable of the device's own
// resource, since a bridge keeps a vanished device, unhealthy, while a
// container holds it); the driver's ResourceSlices (the newest generation
// of each DRA pool, which lists healthy devices only) for the pools
// served through DRA, whose node-local devices have no Instance.
//
// Idempotence. Every object is named from the Broker and the device alone
// (workloadName: a Broker name too long to precede the device's hash
// whole is cut and hashed, so that two Brokers' names never meet),
// carries the labels LabelBroker, LabelPool, LabelDevice
// and LabelWorkload, and has the Broker as its controlling owner, so that
// deleting the Broker deletes them (the garbage collector) and a second
// create of one, by a restarted or a new leader, fails rather than make a
// twin. A look at a Broker writes only what differs: a missing object is
// one create; a Deployment, Service or claim template whose template
// changed (AnnotationHash), or a Deployment or Service edited, one update
// (a claim template, whose spec cannot change, a delete and a create); a
// Broker whose status would not change no status write. The controller remembers its own writes until
// its informers show them (recentWrites), so that a look soon after
// another neither makes an object twice nor deletes one twice.
//
// Lifecycle. A device that vanishes keeps its workloads for the Broker's
// deletionGraceSeconds (DefaultDeletionGrace): its workload records since
// when (AnnotationGoneSince), so that whichever leader looks next keeps
// counting (while that record cannot be written, the leader counts from
// its first look that found the device gone: goneClock); one that
// returns within it keeps them, one that returns after gets them anew. Just before deleting, the controller looks for
// the device once more, that device alone (the Pool strategy's pool,
// whether it has Count devices). A device no longer selected (the
// selector or the strategy changed) loses its workloads at once. A Job
// made for a device carries a hash of what makes it (AnnotationHash):
// one of another hash is replaced, so that only a change of the Job's
// template, not of the Broker's other fields, runs it again. A Job that
// completed or failed is not run again: it carries FinalizerResult, and
// stays, deleted or not (its ttlSecondsAfterFinished, a user), as the
// record of its result until it is no longer wanted; one deleted before
// it finished is let go and made anew. A changed Deployment template is
// an update of the Deployment, which rolls its pods; a Deployment or
// Service edited away from what the Broker wants is put back (its labels
// too, whose loss hides it from the informers: the names' informer still
// shows it), while what the API server fills in is not written over
// (withServerDefaults). A Broker being deleted makes nothing more; its
// Jobs being deleted are let go of (releaseOrphans), as are those of a
// Broker gone.
//
// Status. Counts, the same size whatever the devices: the devices
// selected, the workloads wanted (those of a vanished device until they
// go), and of those Pending, Active, Completed and Failed; the conditions
// Accepted (False for a Broker in a namespace the bridge does not serve,
// or one it cannot read or meet), Created (False, with the first
// failures, when a workload could not be made, or its name is another
// object's) and Ready (True when every workload runs or has finished,
// else the reason: no such pool, no device selected, too few, no
// DeviceClass, too many containers for the device's slots, pods not
// running yet, a write that failed). A write that failed is tried again
// with the queue's backoff, and a Warning Event on the Broker says why;
// a name another object has (a metadata informer of every object of the
// kinds made) is not asked for while that object is there.
//
// The Controller is a job of the elected bridge (an elected.Job, see
// bridge/elected): it runs there only, and only while that bridge leads,
// on the store of every pool the elected bridge opens for its jobs. It acts only once its
// informers (Brokers everywhere; Jobs, Deployments, Services and claim
// templates labelled LabelBroker in each namespace served, and the names
// of every object of those kinds there; the Nodes, of which it keeps the
// allocatable counts of the domain's resources; the driver's
// ResourceSlices and the DeviceClasses) hold their first lists. One worker looks at one Broker
// at a time, queued by its own events, its objects' (after a second, so
// that a burst is one look), changes of its pool's devices, and every
// ten minutes.
//
// It needs (the chart's brokers.enabled): brokers list and watch and
// brokers/status update everywhere; Nodes list and watch (the bridge's
// own role has them); in each namespace of brokers.namespaces, list and
// watch of Jobs, Deployments, Services (and ResourceClaimTemplates with
// DRA pools), get, create, patch and delete of each, update of
// Deployments and Services, create and patch of Events; with
// DRA pools, ResourceSlices list and watch (the DRA front end's role has
// them) and DeviceClasses list and watch.
package broker
