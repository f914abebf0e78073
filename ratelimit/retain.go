package ratelimit

// Retain tells the store the names of the policies the serving
// configuration decides with: named and inline policies, and the
// policies of overrides. Each policy name has a table of its own, made
// at its first decision; a name no longer among these (a policy or route
// renamed, an override's numbers changed) would otherwise keep its
// table, tens of kilobytes, for the life of the process, one more at
// each such reload. Its table is dropped once the sweeper finds it
// holding no bucket and no live one in its record of evicted buckets:
// until then, a policy that comes back (a reload undone) finds its
// buckets as they were, and an evicted spent or blocked one no fuller
// than it left. Before the first call every table stays.
//
// It takes tablesMu, under which the sweeper reads the names again
// before it drops a table: once Retain returns, no table of these names
// goes, not even one the sweeper found empty just before, which a request
// made after Retain may be filling.
func (m *MemoryStore) Retain(names []string) {
	live := make(map[string]bool, len(names))
	for _, n := range names {
		live[n] = true
	}
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	m.live.Store(&live)
}

// dropRetired removes pt, the table of name, when Retain no longer names
// it and it holds nothing a policy of that name would need back (see
// forgettable). A request of a configuration that served
// before the reload may still find it and make a bucket in it; such a
// bucket is of a policy no longer served, and the table goes with the
// request.
func (m *MemoryStore) dropRetired(name string, pt *policyTable, now int64) {
	live := m.live.Load()
	if live == nil || (*live)[name] || !pt.forgettable(now) {
		return
	}
	m.tablesMu.Lock()
	defer m.tablesMu.Unlock()
	// Again under the lock: a Retain that named it since (a reload
	// undone) lets requests fill it that forgettable did not see.
	if (*m.live.Load())[name] {
		return
	}
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

// forgettable reports whether pt holds nothing at now that its policy,
// were it served again, would need: no bucket, no live bucket in the
// record of evicted ones (which keeps a spent budget or a block from
// coming back fresh), no reset noted lately (see noteReset).
func (pt *policyTable) forgettable(now int64) bool {
	for i := range pt.shards {
		s := &pt.shards[i]
		s.mu.Lock()
		ok := s.n == 0 && !s.evicted.liveAt(now) && !s.resetLately(now)
		s.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// resetLately reports whether a reset noted in s still matters at now.
// The caller holds s.mu.
func (s *memShard) resetLately(now int64) bool {
	for _, n := range s.resets {
		if now-n.at <= resetMemory || n.unfold > now {
			return true
		}
	}
	return false
}
