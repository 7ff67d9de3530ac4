# The gendurable server: one static binary with the dashboard embedded.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /gendurable ./cmd/server

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /gendurable /gendurable
EXPOSE 8080
USER nonroot
# No shell in this image: the binary checks itself (GET /readyz on GENDURABLE_ADDR).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/gendurable", "healthcheck"]
ENTRYPOINT ["/gendurable"]
