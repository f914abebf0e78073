// Command sluice is a rate-limiting reverse-proxy API gateway.
//
//	sluice run -config FILE        serve until SIGINT/SIGTERM; SIGHUP reloads FILE
//	sluice validate -config FILE   check FILE; one line per problem
//	sluice demo                    the gateway with a built-in echo upstream
//	sluice simulate ...            replay traffic or an access log against every algorithm offline
//	sluice health [-config FILE | -admin ADDR]
//	                               GET /healthz on the admin listener; exit 0 on 200
//	sluice version                 version, commit, Go version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/simulate"
)

// version and commit are set at build time with -ldflags "-X main.version=...".
var (
	version = "dev"
	commit  = ""
)

const usage = `usage: sluice <command> [flags]

commands:
  run -config FILE        serve until SIGINT/SIGTERM; SIGHUP reloads FILE
  validate -config FILE   exit 0 if FILE is valid, else print every problem and exit 1
  demo                    serve a built-in demo (gateway + echo upstream) and print curl lines
  simulate [flags]        replay a traffic pattern or an access log against every algorithm offline
  health [-config FILE | -admin ADDR]
                          GET /healthz on the admin listener; exit 0 on 200, else 1
  version                 print version, commit and Go version

run 'sluice <command> -h' for a command's flags
`

func main() {
	stop, err := startProfile(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
	}
	os.Exit(code)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "run":
		return runServe(args, stderr)
	case "validate":
		return runValidate(args, stdout, stderr)
	case "demo":
		return runDemo(args, stdout, stderr)
	case "simulate":
		return simulate.Main(args, stdout, stderr, loadSimPolicy)
	case "health":
		return runHealth(args, stderr)
	case "version", "-version", "--version":
		return runVersion(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// runVersion prints the version. It takes no flags but -h, and no
// arguments: as every command, it refuses what it does not know.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := parseAll(fs, args, stderr); err != nil {
		return exitFor(err, 2)
	}
	fmt.Fprintf(stdout, "sluice %s\n", versionString())
	return 0
}

// exitFor is the exit code of a command whose flags ended it: 0 when
// help was asked for (err nil or flag.ErrHelp), else usage, the command's
// code for a usage error.
func exitFor(err error, usage int) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return usage
}

// parseAll parses args into fs, the flags of a command that takes no
// other arguments. It returns nil when the command may go on, else
// flag.ErrHelp when help was asked for, or an error already explained on
// stderr.
func parseAll(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errors.New("unexpected argument")
	}
	return nil
}

func versionString() string {
	c := commit
	if c == "" {
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					c = s.Value
				}
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commonFlags are the flags of run and validate.
type commonFlags struct {
	config   string
	logLevel string
}

// parseFlags parses the flags of run and validate. When it returns nil
// the command is over: help was asked for (flag.ErrHelp) or the flags
// were wrong (err set, already explained on stderr); exitFor tells which.
func parseFlags(name string, args []string, stderr io.Writer) (*commonFlags, error) {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &commonFlags{}
	fs.StringVar(&f.config, "config", "sluice.yaml", "configuration `file`")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := parseAll(fs, args, stderr); err != nil {
		return nil, err
	}
	return f, nil
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("parsing -log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// logStdLogTo sends what other packages write with the standard log
// package through l, at warn: net/http's transport writes there when an
// upstream sends bytes nobody asked for, which would otherwise be a line
// of plain text, with the upstream's bytes, among the JSON lines.
func logStdLogTo(l *slog.Logger) {
	stdlog.SetFlags(0)
	stdlog.SetOutput(slog.NewLogLogger(l.Handler(), slog.LevelWarn).Writer())
}

// runValidate exits 0 for a valid file and 1 for anything else, a usage
// error included: SPEC §1 gives validate no other status.
func runValidate(args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags("validate", args, stderr)
	if f == nil {
		return exitFor(err, 1)
	}
	if _, err := newLogger(f.logLevel, io.Discard); err != nil {
		// run would refuse it: a file validated with it must not pass.
		fmt.Fprintln(stderr, "sluice validate:", err)
		return 1
	}
	if _, err := routes.Load(f.config); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", f.config)
	return 0
}

func runServe(args []string, stderr io.Writer) int {
	// SIGHUP is caught from the start, before the server is up, which can
	// take a second with a Redis that does not answer: a reload sent then
	// (a deploy's reload right after the start) would otherwise end the
	// process, as Go's default for SIGHUP does. It reloads once the
	// server is up.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	f, err := parseFlags("run", args, stderr)
	if f == nil {
		return exitFor(err, 2)
	}
	log, err := newLogger(f.logLevel, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 2
	}
	logStdLogTo(log)
	tuneGCFromEnv()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, f.config, log, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	go func() {
		for range hup {
			srv.Reload()
		}
	}()
	if err := srv.Serve(ctx); err != nil {
		log.Error("serving", "err", err)
		return 1
	}
	return 0
}

// loadSimPolicy takes the simulator's parameters from a policy of a config,
// with its key list and its place among the limits of each route that
// lists it, so that a replayed access log is keyed as the gateway keyed it.
func loadSimPolicy(file, name string) (simulate.Policy, error) {
	cfg, err := routes.Load(file)
	if err != nil {
		return simulate.Policy{}, err
	}
	p, ok := cfg.Policies[name]
	if !ok {
		return simulate.Policy{}, fmt.Errorf("%s: no policy %q", file, name)
	}
	sp := simulate.Policy{Params: simulate.Params{Limit: p.Limit, Window: p.Window, Burst: p.Burst, Queue: p.Queue, MaxWait: p.MaxWait, Block: p.Block}}
	for _, rt := range cfg.Table.Routes {
		for i, l := range rt.Limits {
			if l.Policy.Name != name {
				continue
			}
			if sp.Slots == nil {
				sp.Slots = make(map[string]int)
			}
			sp.Slots[rt.Name] = i
			if rt.CaseSensitive() {
				if sp.CaseSensitive == nil {
					sp.CaseSensitive = make(map[string]bool)
				}
				sp.CaseSensitive[rt.Name] = true
			}
			// Every route that lists a policy keys it alike.
			sp.Key = l.Key.Sources()
			if l.CountStatus != nil {
				sp.Unmodelled = append(sp.Unmodelled, "count_status")
			}
		}
	}
	if ov := cfg.Overrides[name]; ov != nil {
		index := map[*routes.Override]int{}
		for i, o := range ov.List() {
			index[o] = i + 1
			so := simulate.Override{Exempt: o.Exempt}
			if op := o.Policy; !o.Exempt {
				so.Params = simulate.Params{Limit: op.Limit, Window: op.Window, Burst: op.Burst, Queue: op.Queue, MaxWait: op.MaxWait, Block: op.Block}
			}
			sp.Overrides = append(sp.Overrides, so)
		}
		// Replayed keys are bounded, as the log and the buckets keep
		// them; the gateway matched them whole.
		sp.Override = func(key []byte, client netip.Addr) int { return index[ov.MatchBounded(key, client)] }
	}
	slices.Sort(sp.Unmodelled)
	sp.Unmodelled = slices.Compact(sp.Unmodelled)
	return sp, nil
}
