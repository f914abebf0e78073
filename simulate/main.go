package simulate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

const synopsis = `usage: sluice simulate -limit N -window D [-burst B] [-queue Q] [-max-wait D] -at COUNT@OFFSET,... [-format table|json|svg]
       sluice simulate [-config FILE] -policy NAME [overrides] -at COUNT@OFFSET,... [-format table|json|svg]
`

// Main runs `sluice simulate` with args, the words after "simulate", and
// returns the process exit code: 0 on success (and for -h), 1 when the
// config cannot be loaded or the output cannot be written, 2 for a usage
// error, explained on stderr.
//
// With -policy NAME the limit, window, burst, queue and max_wait come from
// that policy of -config (default sluice.yaml) through loadPolicy; any of
// -limit, -window, -burst, -queue and -max-wait given as well override the
// policy's value. loadPolicy may be nil, which makes -policy a usage error.
func Main(args []string, stdout, stderr io.Writer, loadPolicy func(file, name string) (Params, error)) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, synopsis+"\nReplays COUNT requests at each OFFSET (from a window boundary) through every\nalgorithm with a virtual clock and reports what each admits.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var p Params
	fs.Int64Var(&p.Limit, "limit", 0, "`N` requests per window (required without -policy)")
	fs.DurationVar(&p.Window, "window", 0, "the `duration` the limit applies to, e.g. 1m (required without -policy)")
	fs.Int64Var(&p.Burst, "burst", 0, "token_bucket capacity `B` (default: limit)")
	fs.Int64Var(&p.Queue, "queue", 0, "leaky_bucket FIFO capacity `Q`; 0 rejects overflow at once")
	fs.DurationVar(&p.MaxWait, "max-wait", 0, "leaky_bucket longest wait in the queue (default: queue x window/limit)")
	at := fs.String("at", "", "the traffic `pattern`: COUNT requests at each OFFSET as COUNT@OFFSET,... e.g. 100@58s,100@61s (required)")
	format := fs.String("format", "table", "output `format`: table, json or svg")
	config := fs.String("config", "sluice.yaml", "config `file` that -policy is read from")
	policy := fs.String("policy", "", "take limit, window, burst, queue and max_wait from the policy `name`d in -config")
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
	if !set["at"] {
		return usage("-at is required, e.g. -at 100@58s,100@61s")
	}
	arrivals, err := ParseArrivals(*at)
	if err != nil {
		return usage("-at: %v", err)
	}

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
	}
	if err := p.Validate(); err != nil {
		return usage("%s", flagNames(err))
	}

	rs, err := Run(p, arrivals)
	if err != nil {
		return usage("%v", err)
	}
	switch *format {
	case "json":
		err = WriteJSON(stdout, rs)
	case "svg":
		err = WriteSVG(stdout, p, rs)
	default:
		err = WriteTable(stdout, rs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return 1
	}
	return 0
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
