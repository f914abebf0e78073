package main

import (
	"context"
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
	if err := parseAll(fs, args, stderr); err != nil {
		return exitFor(err, 2)
	}
	log, err := newLogger(*level, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 2
	}
	logStdLogTo(log)
	tuneGCFromEnv()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Demo(ctx, server.DemoOptions{Listen: *listen, Admin: *adminAddr, Out: stdout, Log: log}); err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	return 0
}
