// Package routes loads sluice's configuration file and compiles it into the
// structures the gateway runs on: the route table, the rate-limit policies
// and the key extractors that pick each request's bucket.
//
// Loading goes in stages. The YAML is decoded strictly (unknown fields are
// errors) from its node tree, so every value keeps its line and column;
// ${NAME} and ${NAME:-default} in values are expanded from the
// environment; defaults are filled in; everything is validated, collecting
// every problem rather than stopping at the first; and the result is
// compiled into immutable structs that are safe for concurrent use. The
// package knows nothing of sockets: it matches *http.Request values and
// reads their headers, but serving them is the proxy's job.
package routes
