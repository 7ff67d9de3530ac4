package webhookclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gendurable/gendurable/internal/webhookclient"
)

// BenchmarkPost is one webhook exchange on a kept-alive connection, the server in the
// same process (its CPU counts too): the client's cost per call, compared across changes.
func BenchmarkPost(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"done":{}}`))
	}))
	b.Cleanup(srv.Close)
	c := webhookclient.New(webhookclient.Config{MaxIdlePerHost: 64})
	body := make([]byte, 290)
	headers := []webhookclient.Header{{Name: "Webhook-Id", Value: "msg_1"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Post(context.Background(), srv.URL, headers, body, 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
}
