package kube

// testHooks are the points where a test pauses one actor between its read
// and its write, to let another act there: all nil outside the tests.
type testHooks struct {
	// pruneMarked runs in PruneUnseen after it has marked a pool's
	// Instances, before its second look at the pool's Presences;
	// pruneListed after that look, before it deletes there.
	pruneMarked, pruneListed func(pool string)
	// described runs in Observe after each Instance is described.
	described func(name string)
	// relisted runs in relist after each label selector's list.
	relisted func(selector string)
	// forgetWrite runs in ForgetNode just before each write of an
	// Instance; forgetPresences after it has listed the node's
	// Presences, before it deletes them.
	forgetWrite     func(name string)
	forgetPresences func(node string)
	// claimWrite runs in Claim just before each write of an Instance.
	claimWrite func(name string)
}

// hook calls f with arg unless f is nil.
func hook[T any](f func(T), arg T) {
	if f != nil {
		f(arg)
	}
}
