# kvindex container: a static binary on a distroless base (no shell, runs as nonroot).
#   docker build -t kvindex --build-arg VERSION=$(git describe --always --dirty) .
#   docker run -p 7070:7070 -v kvindex-data:/data kvindex [--upstream URL] [--zmq ENDPOINT]
# Arguments after the image name go to `kvindex serve`; KVINDEX_<FLAG> variables work too.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/kvindex/kvindex/server.Version=${VERSION}" \
      -o /out/kvindex ./cmd/kvindex \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvindex /usr/local/bin/kvindex
COPY --from=build --chown=nonroot:nonroot /out/data /data
VOLUME /data
EXPOSE 7070
# Inside a container the port must listen beyond loopback; publish it only where it is meant
# to be reachable.
ENV KVINDEX_DATA_DIR=/data KVINDEX_LISTEN=0.0.0.0:7070
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/kvindex", "--log-format", "json", "serve"]
