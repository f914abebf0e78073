# Build: docker build -t sluice .
# Run:   docker run -p 8080:8080 -v "$PWD/sluice.yaml:/etc/sluice/sluice.yaml:ro" --stop-timeout 20 sluice
# With ACME, mount a writable volume for tls.acme.storage (the image runs as
# a non-root user), e.g. -v sluice-certs:/var/lib/sluice with
# storage: /var/lib/sluice/certs. The image holds /var/lib/sluice owned by
# that user, so a new named volume mounted there is writable too.
# Stop: docker stop waits 10 s before SIGKILL; give it shutdown_timeout
# (15 s by default) and a margin: docker run --stop-timeout 20 ...
# Health: the image has no shell, so HEALTHCHECK runs `sluice health`, which
# GETs /healthz on the config's admin listener (keep admin on; it may stay
# on 127.0.0.1, the probe runs inside the container).
# The Go release go.mod names: the image builds with its own toolchain only.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sluice ./cmd/sluice
# The final image has no shell to make directories with.
RUN mkdir -p /out/var/lib/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY config.example.yaml /etc/sluice/sluice.yaml
COPY --from=build --chown=65532:65532 /out/var/lib/sluice /var/lib/sluice
EXPOSE 8080 8443 9091
USER nonroot:nonroot
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/sluice", "health", "-config", "/etc/sluice/sluice.yaml"]
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run", "-config", "/etc/sluice/sluice.yaml"]
