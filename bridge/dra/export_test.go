package dra

// SetBeforeCreate has the first slices' writer call f before each create
// with the count created so far; set it before the first Publish.
func SetBeforeCreate(s *NodeSlices, f func(created int)) { s.beforeCreate = f }
