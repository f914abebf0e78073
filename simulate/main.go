package simulate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

const synopsis = `usage: sluice simulate -limit N -window D [-burst B] [-queue Q] [-max-wait D] TRAFFIC [-accuracy] [-format table|json|svg]
       sluice simulate [-config FILE] -policy NAME [overrides] TRAFFIC [-accuracy] [-format table|json|svg]
TRAFFIC is one of:
       -at COUNT@OFFSET,...
       -pattern steady|poisson|burst -rate R -duration D [-consumers N] [-seed S] [-show-keys]
       -replay FILE [-key SOURCES] [-show-keys]
`

// Policy is a policy of a config as the simulator takes it.
type Policy struct {
	Params
	// Key is the policy's key list, such as ["header:X-API-Key", "ip"];
	// nil when no route lists the policy, so it is not known.
	Key []string
	// Slots maps each route that lists the policy to its place among the
	// route's limits (see ReplayOptions.Slots).
	Slots map[string]int
	// CaseSensitive names the routes among Slots that set
	// match.case_sensitive (see ReplayOptions.CaseSensitive).
	CaseSensitive map[string]bool
	// Unmodelled names what the policy sets that the simulator does not
	// replay ("count_status"): it decides every request as if it were not
	// set and says so on stderr.
	Unmodelled []string
	// Overrides and Override are the policy's overrides and the one a
	// request matches (see ReplayOptions).
	Overrides []Override
	Override  func(key []byte, client netip.Addr) int
}

// maxBadShown bounds the bad lines described one by one; all of them are
// counted and listed by number.
const maxBadShown = 20

// Main runs `sluice simulate` with args, the words after "simulate", and
// returns the process exit code: 0 on success (and for -h), 1 when the
// config cannot be loaded, no line of the log can be read, or the output
// cannot be written, 2 for a usage error, explained on stderr.
//
// With -policy NAME the limit, window, burst, queue, max_wait and block,
// and for -replay the key and overrides, come from that policy of -config
// (default sluice.yaml)
// through loadPolicy; any of -limit, -window, -burst, -queue, -max-wait and
// -key given as well override the policy's value. loadPolicy may be nil,
// which makes -policy a usage error.
func Main(args []string, stdout, stderr io.Writer, loadPolicy func(file, name string) (Policy, error)) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, synopsis+"\nReplays traffic through every algorithm with a virtual clock and reports what\neach admits.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var p Params
	fs.Int64Var(&p.Limit, "limit", 0, "`N` requests per window (required without -policy)")
	fs.DurationVar(&p.Window, "window", 0, "the `duration` the limit applies to, e.g. 1m (required without -policy)")
	fs.Int64Var(&p.Burst, "burst", 0, "token_bucket capacity `B`, > 0 (default: limit)")
	fs.Int64Var(&p.Queue, "queue", 0, "leaky_bucket FIFO capacity `Q`; 0 rejects overflow at once")
	fs.DurationVar(&p.MaxWait, "max-wait", 0, "leaky_bucket longest wait in the queue, > 0 (default: queue x window/limit)")
	at := fs.String("at", "", "the traffic `pattern`: COUNT requests at each OFFSET as COUNT@OFFSET,... e.g. 100@58s,100@61s")
	pattern := fs.String("pattern", "", "generate the traffic: `shape` steady, poisson or burst, with -rate and -duration")
	rate := fs.Float64("rate", 0, "-pattern: requests per second `R` of each consumer, on average")
	duration := fs.Duration("duration", 0, "-pattern: how long the traffic lasts, e.g. 10m")
	consumers := fs.Int("consumers", 1, "-pattern: `N` consumers, each with its own bucket")
	seed := fs.Uint64("seed", 1, "-pattern: the random `seed`; equal seeds give equal traffic")
	replay := fs.String("replay", "", "replay the access log in `file`: sluice's JSON log or nginx's combined format")
	keyList := fs.String("key", "", "-replay: the key `sources`, comma-separated, e.g. header:X-API-Key,ip (default: the policy's, or ip)")
	showKeys := fs.Bool("show-keys", false, "show consumers' keys rather than their digests (keys are often credentials)")
	accuracy := fs.Bool("accuracy", false, "compare sliding_window_counter with the exact sliding_window_log decision by decision")
	format := fs.String("format", "table", "output `format`: table, json or svg")
	config := fs.String("config", "sluice.yaml", "config `file` that -policy is read from")
	policy := fs.String("policy", "", "take limit, window, burst, queue, max_wait, block, overrides and key from the policy `name`d in -config")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has explained it
	}
	usage := func(msg string, a ...any) int {
		for line := range strings.Lines(fmt.Sprintf(msg, a...)) {
			fmt.Fprintf(stderr, "sluice simulate: %s\n", strings.TrimSuffix(line, "\n"))
		}
		fmt.Fprint(stderr, synopsis)
		return 2
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	switch *format {
	case "table", "json", "svg":
	default:
		return usage("-format: want table, json or svg, got %q", *format)
	}
	modes := 0
	for _, m := range []string{"at", "pattern", "replay"} {
		if set[m] {
			modes++
		}
	}
	switch {
	case modes == 0:
		return usage("-at, -pattern or -replay is required, e.g. -at 100@58s,100@61s")
	case modes > 1:
		return usage("-at, -pattern and -replay are alternatives: give one")
	}
	for _, f := range []string{"rate", "duration", "consumers", "seed"} {
		if set[f] && !set["pattern"] {
			return usage("-%s needs -pattern", f)
		}
	}
	if set["key"] && !set["replay"] {
		return usage("-key needs -replay")
	}
	if set["show-keys"] && set["at"] {
		return usage("-show-keys needs -pattern or -replay (-at has one consumer)")
	}
	// An explicit 0 is refused, as burst: 0 and max_wait: 0 are in a
	// config: read as "the default", -burst 0 would quietly give
	// token_bucket the limit for capacity, -policy's burst too.
	if set["burst"] && p.Burst == 0 {
		return usage("-burst: must be > 0; leave it out for the default, the limit")
	}
	if set["max-wait"] && p.MaxWait == 0 {
		return usage("-max-wait: must be > 0; leave it out for the default, queue x window/limit, or give -queue 0 to reject what cannot leave at once")
	}
	if *accuracy && *format == "svg" {
		return usage("-accuracy prints a table or json, not svg")
	}
	var arrivals []Arrival
	if set["at"] {
		var err error
		if arrivals, err = ParseArrivals(*at); err != nil {
			return usage("-at: %v", err)
		}
	}
	var pt Pattern
	if set["pattern"] {
		switch {
		case !set["rate"]:
			return usage("-pattern needs -rate R, requests per second of each consumer")
		case !set["duration"]:
			return usage("-pattern needs -duration D, e.g. 10m")
		}
		pt = Pattern{Shape: *pattern, Rate: *rate, Duration: *duration, Consumers: *consumers, Seed: *seed}
	}

	var ro ReplayOptions
	if *policy == "" {
		if set["config"] {
			return usage("-config needs -policy NAME")
		}
		switch {
		case !set["limit"] && !set["window"]:
			return usage("-limit and -window are required (or -policy NAME)")
		case !set["limit"]:
			return usage("-limit is required (or -policy NAME)")
		case !set["window"]:
			return usage("-window is required (or -policy NAME)")
		}
		ro.Key = []string{"ip"}
	} else {
		if loadPolicy == nil {
			return usage("-policy is not available in this build")
		}
		from, err := loadPolicy(*config, *policy)
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: loading policy %q from %s: %v\n", *policy, *config, err)
			return 1
		}
		if !set["limit"] {
			p.Limit = from.Limit
		}
		if !set["window"] {
			p.Window = from.Window
		}
		if !set["burst"] {
			p.Burst = from.Burst
		}
		if !set["queue"] {
			p.Queue = from.Queue
		}
		if !set["max-wait"] {
			p.MaxWait = from.MaxWait
		}
		p.Block = from.Block
		ro.Key, ro.Slots, ro.CaseSensitive = from.Key, from.Slots, from.CaseSensitive
		ro.Overrides, ro.Override = from.Overrides, from.Override
		unmodelled := from.Unmodelled
		if set["key"] && from.Override != nil {
			// Overrides match the policy's own key values, not -key's.
			ro.Overrides, ro.Override = nil, nil
			unmodelled = append(slices.Clone(unmodelled), "overrides (with -key)")
		}
		if len(unmodelled) > 0 {
			fmt.Fprintf(stderr, "sluice simulate: policy %q sets %s, which the simulator does not replay: every request is decided as if it were not set\n", *policy, strings.Join(unmodelled, ", "))
		}
		if set["replay"] && !set["key"] && from.Key == nil {
			return usage("-replay: no route lists policy %q, so its key is not known: give -key SOURCES", *policy)
		}
	}
	if set["key"] {
		// Logged keys are the policy's own key values, not these.
		ro.Key, ro.Slots = strings.Split(*keyList, ","), onlyRoutes(ro.Slots)
		if _, err := parseKey(ro.Key); err != nil {
			return usage("-key: %v", err)
		}
	}
	if err := p.Validate(); err != nil {
		return usage("%s", flagNames(err))
	}

	var tr *Traffic
	var err error
	switch {
	case set["at"]:
		tr, err = FromArrivals(p.Window, arrivals)
		if err != nil {
			return usage("%v", err)
		}
	case set["pattern"]:
		tr, err = pt.Traffic(p.Window)
		if err != nil {
			return usage("-%s", err)
		}
	default:
		var code int
		if tr, code = readReplay(*replay, ro, *policy, stderr); tr == nil {
			return code
		}
	}

	write := func(err error) int {
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
			return 1
		}
		return 0
	}
	if *accuracy {
		var acc Accuracy
		o := Options{Algorithms: []ratelimit.Algorithm{ratelimit.SlidingWindowLog, ratelimit.SlidingWindowCounter}, Accuracy: &acc}
		if _, err := Simulate(p, tr, o); err != nil {
			return usage("%v", err)
		}
		if *format == "json" {
			return write(WriteAccuracyJSON(stdout, &acc, *showKeys))
		}
		return write(WriteAccuracy(stdout, &acc, *showKeys))
	}
	o := Options{Consumers: !set["at"]}
	if *format == "svg" {
		o.Timeline = NewTimeline(p, tr)
	}
	rs, err := Simulate(p, tr, o)
	if err != nil {
		return usage("%v", err)
	}
	switch {
	case *format == "svg":
		return write(WriteSVG(stdout, p, o.Timeline, rs))
	case *format == "json" && o.Consumers:
		return write(WriteConsumerJSON(stdout, rs, *showKeys))
	case *format == "json":
		return write(WriteJSON(stdout, rs))
	case o.Consumers:
		return write(WriteConsumerTable(stdout, rs, *showKeys))
	}
	return write(WriteTable(stdout, rs))
}

// onlyRoutes keeps the routes of slots but no place in their keys, which
// -key makes meaningless: the lines of other routes are still left out.
func onlyRoutes(slots map[string]int) map[string]int {
	if len(slots) == 0 {
		return nil
	}
	out := make(map[string]int, len(slots))
	for r := range slots {
		out[r] = -1
	}
	return out
}

// readReplay reads the log at path and reports on stderr what it could not
// use. It returns nil and the exit code when there is nothing to replay.
func readReplay(path string, ro ReplayOptions, policy string, stderr io.Writer) (*Traffic, int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: -replay: %v\n", err)
		return nil, 1
	}
	defer f.Close()
	tr, rep, err := ReadLog(f, ro)
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: -replay: reading %s: %v\n", path, err)
		return nil, 1
	}
	say := func(msg string, a ...any) {
		fmt.Fprintf(stderr, "sluice simulate: %s: %s\n", path, fmt.Sprintf(msg, a...))
	}
	for _, b := range rep.Bad[:min(len(rep.Bad), maxBadShown)] {
		fmt.Fprintf(stderr, "sluice simulate: %s:%d: %s\n", path, b.Line, b.Reason)
	}
	if n := len(rep.Bad); n > 0 {
		say("%d of %d lines could not be read and were left out: %s", n, rep.Lines, lineRanges(rep.Bad))
	}
	if rep.NotRequests > 0 {
		say("%s left out: not requests", plural(rep.NotRequests, "log line"))
	}
	if rep.OtherRoutes > 0 {
		say("%s left out: their routes do not list policy %q", plural(rep.OtherRoutes, "request"), policy)
	}
	if rep.Refused > 0 {
		say("%s left out: the gateway answers them before any limit counts them (a key source given twice, a body over max_body, a method or path it refuses, no request line)", plural(rep.Refused, "request"))
	}
	for _, s := range rep.Unrecorded {
		hint := ""
		if rep.Format == FormatSluice {
			hint = " (sluice logs keys with log.log_keys: true)"
		}
		say("the log does not record key source %s: it counted as empty on every request%s", s, hint)
	}
	if rep.Requests == 0 {
		// SPEC §10: the status stays 0 unless no line could be read.
		if rep.Lines-rep.Blank-len(rep.Bad) == 0 {
			say("no line could be read")
			return nil, 1
		}
		say("no request to replay")
		return tr, 0
	}
	last := tr.Requests[len(tr.Requests)-1].At
	say("%s, %s from %s, %s to %s", rep.Format, plural(rep.Requests, "request"), plural(len(tr.Keys), "consumer"),
		tr.Origin.Add(tr.Requests[0].At).Format(time.RFC3339), tr.Origin.Add(last).Format(time.RFC3339))
	return tr, 0
}

// plural counts n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// lineRanges lists the bad lines' numbers, runs joined: "3, 17-20, 31".
func lineRanges(bad []BadLine) string {
	var b strings.Builder
	for i := 0; i < len(bad); {
		j := i
		for j+1 < len(bad) && bad[j+1].Line == bad[j].Line+1 {
			j++
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(bad[i].Line))
		if j > i {
			b.WriteString("-" + strconv.Itoa(bad[j].Line))
		}
		i = j + 1
	}
	return b.String()
}

// flagNames rewrites Params.Validate's problems ("max_wait: must be >= 0")
// in terms of the flags ("-max-wait: must be >= 0"), one per line.
func flagNames(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = "-" + strings.Replace(l, "max_wait:", "max-wait:", 1)
	}
	return strings.Join(lines, "\n")
}
