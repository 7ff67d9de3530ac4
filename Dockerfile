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
ENTRYPOINT ["/gendurable"]
