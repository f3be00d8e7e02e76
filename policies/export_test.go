package policies

// SetEdgesPerHandover makes a streamed run hand each worker's call edges to the recorder n at
// a time, so that a test can make every stretch short; the returned function restores it.
func SetEdgesPerHandover(n int) (restore func()) {
	was := edgesPerHandover
	edgesPerHandover = n
	return func() { edgesPerHandover = was }
}
