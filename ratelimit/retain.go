package ratelimit

// Retain tells the store the names of the policies the serving
// configuration decides with: named and inline policies, and the
// policies of overrides. Each policy name has a table of its own, made
// at its first decision; a name no longer among these (a policy or route
// renamed, an override's numbers changed) would otherwise keep its
// table, tens of kilobytes, for the life of the process, one more at
// each such reload. Its table is dropped once the sweeper finds it
// holding no bucket: until every bucket of it is idle, a policy that
// comes back finds them as they were. Before the first call every table
// stays.
func (m *MemoryStore) Retain(names []string) {
	live := make(map[string]bool, len(names))
	for _, n := range names {
		live[n] = true
	}
	m.live.Store(&live)
}

// dropRetired removes pt, the table of name, when Retain no longer names
// it and it holds no bucket. A request of a configuration that served
// before the reload may still find it and make a bucket in it; such a
// bucket is of a policy no longer served, and the table goes with the
// request.
func (m *MemoryStore) dropRetired(name string, pt *policyTable) {
	live := m.live.Load()
	if live == nil || (*live)[name] || pt.len() > 0 {
		return
	}
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	old := *m.tables.Load()
	if old[name] != pt {
		return
	}
	tables := make(map[string]*policyTable, len(old)-1)
	for n, t := range old {
		if n != name {
			tables[n] = t
		}
	}
	m.tables.Store(&tables)
}
