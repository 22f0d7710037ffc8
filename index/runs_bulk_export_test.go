package index

// SetRunsBulk sets how many positions a run-layout Commit lays down per hold of the write lock
// and from how many private positions a builder compacts, and returns the restore: the tests
// use a few positions, so that they cross both.
func SetRunsBulk(chunk, compactFrom int) (restore func()) {
	oldChunk, oldCompact := runCommitChunk, runCompactFrom
	runCommitChunk, runCompactFrom = chunk, compactFrom
	return func() { runCommitChunk, runCompactFrom = oldChunk, oldCompact }
}

// AuditRunTree checks the run tree's invariants (RunTree.Audit) of an index on the run layout.
func (ix *Index) AuditRunTree() error {
	ix.runs.mu.RLock()
	defer ix.runs.mu.RUnlock()
	return (&RunTree{t: ix.runs}).Audit()
}

// RunsPositions returns how many private positions a run-layout builder keeps.
func (b *RankBuilder) RunsPositions() int { return len(b.runs.pos) }
