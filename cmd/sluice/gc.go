package main

import "runtime/debug"

// defaultGOGC is the collector's target when the environment sets no GOGC:
// the heap may grow to 5 times the live data between collections instead
// of Go's 2 (GOGC=100). A gateway's live heap is small next to what each
// request allocates, so the collector would otherwise run every few
// thousand requests; README › Performance gives what it costs in memory
// and buys in CPU. GOGC in the environment, GOMEMLIMIT too, work as they
// do for any Go program.
const defaultGOGC = 400

// tuneGC applies defaultGOGC unless lookup (os.LookupEnv) finds GOGC in
// the environment.
func tuneGC(lookup func(string) (string, bool)) {
	if _, ok := lookup("GOGC"); ok {
		return
	}
	debug.SetGCPercent(defaultGOGC)
}
