package kube

// testHooks are the points where a test pauses one actor between its read
// and its write, to let another act there: all nil outside the tests.
type testHooks struct {
	// pruneListed runs in PruneUnseen after its last look at a pool's
	// Presences, before it deletes there.
	pruneListed func(pool string)
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
