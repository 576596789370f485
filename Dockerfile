# The Fibril Go image, built from source in two stages:
#
#   docker build -t fibril-go:local .
#   docker build --build-arg VERSION=v1.2.0 -t fibril-go:1.2.0 .
#
# The build stage compiles static binaries (CGO_ENABLED=0) on the official
# Go image, stamped like scripts/release.sh stamps them; the final stage is
# `scratch` with nothing but the broker, the CLI, CA certificates (for a
# Consul agent behind a public CA) and an empty /data owned by the user the
# broker runs as. No shell: the health check is the broker's own `fibril
# health`. integration/release_test.go checks this file's structure; CI
# cannot pull images, so it exercises the single-stage contrib/swarm
# Dockerfile's inputs instead (a locally built static binary).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first: this layer stays cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=""
ARG DATE=""
RUN set -eu; \
    pkg=github.com/fibrilgo/fibril/core/buildinfo; \
    ldflags="-s -w -X $pkg.version=$VERSION -X $pkg.revision=$REVISION -X $pkg.date=$DATE"; \
    for b in fibril fibrilctl; do \
      CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o /out/usr/local/bin/$b ./cmd/$b; \
    done; \
    mkdir -p /out/data && chown 65532:65532 /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/usr/local/bin/ /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/data /data
# Not root: a fixed uid/gid with no entry in /etc/passwd (there is none).
USER 65532:65532
ENV FIBRIL_DATA_DIR=/data
# Listen on every interface inside the container; publish what clients need.
ENV FIBRIL_BROKER_BIND=0.0.0.0:9876
ENV FIBRIL_ADMIN_BIND=0.0.0.0:8081
VOLUME /data
# Client and peer port (tcp transport: one port), admin, raft.
EXPOSE 9876 8081 7946
# Liveness only (/healthz): /readyz is for load balancers and readiness
# probes; a broker that is recovering or draining must not be restarted.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["/usr/local/bin/fibril", "health"]
ENTRYPOINT ["/usr/local/bin/fibril"]
