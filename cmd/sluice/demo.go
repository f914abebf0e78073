package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/server"
)

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway `address`")
	adminAddr := fs.String("admin", "127.0.0.1:9091", "admin `address` (\"\" turns it off)")
	level := fs.String("log-level", "warn", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := newLogger(*level, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 2
	}
	tuneGCFromEnv()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Demo(ctx, server.DemoOptions{Listen: *listen, Admin: *adminAddr, Out: stdout, Log: log}); err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	return 0
}
