// Package fake provides an in-memory store.Store for unit tests of code that
// allocates device slots. It follows the semantics of package disk: fn works
// on a copy, so a failing fn or an injected save failure leaves the stored
// state exactly as it was; states are copied through their JSON encoding,
// so only what disk would persist survives; and allocations stored under
// another boot id are dropped into State.Dropped on the next Update.
package fake
