package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/routes"
)

// runHealth is `sluice health`: GET /healthz on the admin listener, for a
// container HEALTHCHECK (the image has no shell, so no curl either). It
// exits 0 on 200 and 1 otherwise, flag errors included (Docker reserves
// 2), with one line on stderr.
func runHealth(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice health", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the failure is reported in one line below
	config := fs.String("config", "sluice.yaml", "configuration `file` whose admin address to probe")
	adminAddr := fs.String("admin", "", "admin listener `address` to probe (instead of -config)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice health: "+format+"\n", a...)
		return 1
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "Usage of sluice health:")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		return fail("%v", err)
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	configSet := false
	fs.Visit(func(f *flag.Flag) { configSet = configSet || f.Name == "config" })
	addr := *adminAddr
	switch {
	case addr != "" && configSet:
		return fail("use -config or -admin, not both")
	case addr == "":
		// Only the admin field is read: the gateway keeps serving its
		// last good config when the file has a mistake elsewhere.
		a, err := routes.LoadAdmin(*config)
		if err != nil {
			return fail("%s", oneLine(err))
		}
		if a == "" {
			return fail("%s: the admin listener is off (admin: \"\")", *config)
		}
		addr = a
	}
	url, err := healthURL(addr)
	if err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fail("%v", err)
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return fail("%v", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail("GET %s: %s", url, resp.Status)
	}
	return 0
}

// healthURL is the /healthz URL of the admin listener at addr. A listener
// on every interface (":9091", "0.0.0.0:9091", "[::]:9091") is reached on
// loopback, where the probe runs.
func healthURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin address %q: %w", addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}

// oneLine joins the lines of a multi-problem error, so a probe's failure
// stays one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
