package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/httpapi"
	"github.com/gendurable/gendurable/internal/netguard"
	"github.com/gendurable/gendurable/internal/pg"
	"github.com/gendurable/gendurable/internal/pg/pgtest"
)

// specFuzzBudget bounds the spec-driven fuzzer: requests and wall time.
// GENDURABLE_SPECFUZZ_REQUESTS raises the request budget for a longer run and
// GENDURABLE_SPECFUZZ_SEED changes the generator's seed (default 42).
const (
	specFuzzRequests = 3000
	specFuzzTime     = 45 * time.Second
)

// TestSpecFuzz walks every operation of openapi.yaml and sends it generated input, valid
// and invalid (wrong types, missing required fields, unknown fields, huge strings, NUL,
// lone surrogates, negative and overflowing numbers, overflowing durations, malformed and
// trailing JSON, bad path and query parameters) against the real router on a real
// database. Every answer must be below 500 and match the spec, and a 4xx must leave
// every table as it was. Deterministic (a fixed seed), bounded in requests and time.
func TestSpecFuzz(t *testing.T) {
	t.Parallel()
	f := newSpecFuzzer(t, "")
	budget := specFuzzRequests
	if n, err := strconv.Atoi(os.Getenv("GENDURABLE_SPECFUZZ_REQUESTS")); err == nil && n > 0 {
		budget = n
	}
	ops := f.operations()
	deadline := time.Now().Add(specFuzzTime)
	for f.requests < budget && time.Now().Before(deadline) {
		for _, op := range ops {
			f.fuzzOperation(op)
		}
	}
	covered := 0
	for _, op := range ops {
		if f.perOp[op.method+" "+op.path] > 0 {
			covered++
		}
	}
	t.Logf("spec fuzz: %d operations (%d covered), %d requests, %d 2xx, %d 4xx, %d 5xx, %d spec mismatches, %d 4xx that wrote",
		len(ops), covered, f.requests, f.byClass[2], f.byClass[4], f.byClass[5], f.mismatches, f.wroteOn4xx)
	if covered != len(ops) {
		t.Errorf("only %d of %d operations were exercised", covered, len(ops))
	}
	if f.byClass[2] == 0 || f.byClass[4] == 0 {
		t.Errorf("the generator produced no valid (%d) or no invalid (%d) requests", f.byClass[2], f.byClass[4])
	}
}

// TestSpecFuzzWithAuth sends every operation, valid and broken, with no credential, a
// wrong one, a read-scope key and the admin token to a server with authentication on:
// the 401s and 403s must match the spec and write nothing too.
func TestSpecFuzzWithAuth(t *testing.T) {
	t.Parallel()
	f := newSpecFuzzer(t, "admin-token")
	r := f.a.do("POST", "/v1/api-keys", `{"name": "reader", "scope": "read"}`)
	if r.status != 201 {
		t.Fatalf("read key: %d %s", r.status, r.body)
	}
	readKey := r.json(t)["key"].(string)
	ops := f.operations()
	for round := range 2 {
		for _, token := range []string{"", "wrong", "gdk_unknown", readKey, "admin-token"} {
			f.token = token
			for _, op := range ops {
				f.send(op, f.request(op, round == 1))
			}
		}
	}
	t.Logf("spec fuzz with auth: %d requests, %d 2xx, %d 4xx, %d 5xx, %d spec mismatches, %d 4xx that wrote",
		f.requests, f.byClass[2], f.byClass[4], f.byClass[5], f.mismatches, f.wroteOn4xx)
}

// newSpecFuzzer serves the API on a fresh database (authentication on when token is
// set) with the fixtures valid requests refer to.
func newSpecFuzzer(t *testing.T, token string) *specFuzzer {
	doc, err := httpapi.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDB(t)
	eng, err := engine.New(db, engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A small regular limit so that huge strings also reach the 413 path.
	h, err := httpapi.New(eng, httpapi.Config{MaxBodyBytes: 256 << 10, MaxBatchBodyBytes: 4 << 20,
		Guard: &netguard.Guard{AllowPrivate: true}, APIToken: token}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &api{t: t, url: newPlainServer(t, h), db: db, eng: eng, token: token}
	seed := uint64(42)
	if n, err := strconv.ParseUint(os.Getenv("GENDURABLE_SPECFUZZ_SEED"), 10, 64); err == nil {
		seed = n
	}
	f := &specFuzzer{t: t, a: a, doc: doc, rng: rand.New(rand.NewPCG(11, seed)), token: token}
	f.fixtures()
	f.fingerprintSQL = fingerprintSQL(t, db)
	return f
}

// newPlainServer serves h without the conformance wrapper: the fuzzer counts mismatches
// itself instead of failing on the first.
func newPlainServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

type operation struct {
	method, path string
	op           *openapi3.Operation
	params       openapi3.Parameters
}

type specFuzzer struct {
	t              *testing.T
	a              *api
	doc            *openapi3.T
	rng            *rand.Rand
	fingerprintSQL string
	// token is sent as the bearer credential when set.
	token string

	jobID                            int64
	requests, mismatches, wroteOn4xx int
	byClass                          [6]int
	perOp                            map[string]int
}

func (f *specFuzzer) operations() []operation {
	var ops []operation
	paths := f.doc.Paths.Map()
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		item := paths[p]
		methods := item.Operations()
		names := make([]string, 0, len(methods))
		for m := range methods {
			names = append(names, m)
		}
		slices.Sort(names)
		for _, m := range names {
			op := methods[m]
			params := append(openapi3.Parameters{}, item.Parameters...)
			params = append(params, op.Parameters...)
			ops = append(ops, operation{method: m, path: p, op: op, params: params})
		}
	}
	if len(ops) < 35 {
		f.t.Fatalf("only %d operations in openapi.yaml", len(ops))
	}
	return ops
}

// fixtures creates what valid requests refer to.
func (f *specFuzzer) fixtures() {
	f.perOp = map[string]int{}
	a := f.a
	for _, req := range [][3]string{
		{"PUT", "/v1/handlers/h", `{"url": "http://93.184.215.14/steps"}`},
		{"PUT", "/v1/rate-limits/r", `{"rate": 5, "burst": 10}`},
		{"PUT", "/v1/gates/g", `{"limit": 3}`},
		{"PUT", "/v1/queues/q", `{"batch": 10}`},
		{"POST", "/v1/api-keys", `{"name": "fuzz", "scope": "read"}`},
	} {
		if r := a.do(req[0], req[1], req[2]); r.status >= 300 {
			f.t.Fatalf("fixture %s %s: %d %s", req[0], req[1], r.status, r.body)
		}
	}
	r := a.do("POST", "/v1/jobs", `{"handler": "h", "key": "k", "input": {"n": 1}}`)
	if r.status != 201 {
		f.t.Fatalf("fixture job: %d %s", r.status, r.body)
	}
	f.jobID = int64(r.json(f.t)["id"].(float64))
}

// fingerprintSQL builds one statement that answers every table's row count and latest
// change, so that "a 4xx wrote nothing" costs one round trip.
func fingerprintSQL(t testing.TB, db *pg.DB) string {
	rows, err := db.QueryStrings(context.Background(), `SELECT table_name, bool_or(column_name = 'updated_at')
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ANY($1) GROUP BY 1 ORDER BY 1`, tables)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, row := range rows {
		parts = append(parts, fmt.Sprintf("(SELECT count(*) FROM %s)::text", row[0]))
		if row[1] == "true" {
			parts = append(parts, fmt.Sprintf("coalesce((SELECT max(updated_at) FROM %s)::text, '')", row[0]))
		}
	}
	parts = append(parts, "coalesce((SELECT max(revoked_at) FROM api_keys)::text, '')",
		"(SELECT coalesce(sum(available), 0) FROM gate_slots)::text")
	return "SELECT concat_ws(',', " + strings.Join(parts, ", ") + ")"
}

func (f *specFuzzer) fingerprint() string {
	rows, err := f.a.db.QueryStrings(context.Background(), f.fingerprintSQL)
	if err != nil || len(rows) != 1 {
		f.t.Fatalf("fingerprint: %v", err)
	}
	return rows[0][0]
}

// fuzzOperation sends one valid and a few invalid requests for op.
func (f *specFuzzer) fuzzOperation(op operation) {
	f.send(op, f.request(op, false))
	for range 3 {
		f.send(op, f.request(op, true))
	}
}

type fuzzRequest struct {
	method, path, query string
	body                []byte
	contentType         string
}

// request builds a request for op: every part valid, or one part broken.
func (f *specFuzzer) request(op operation, broken bool) fuzzRequest {
	req := fuzzRequest{method: strings.ToUpper(op.method)}
	// Which part to break: a path parameter, a query parameter or the body.
	var parts []string
	var query []*openapi3.Parameter
	path := op.path
	for _, p := range op.params {
		switch p.Value.In {
		case "path":
			parts = append(parts, "path:"+p.Value.Name)
		case "query":
			parts = append(parts, "query:"+p.Value.Name)
			query = append(query, p.Value)
		}
	}
	var body *openapi3.Schema
	if rb := op.op.RequestBody; rb != nil && rb.Value != nil {
		if mt := rb.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
			body = mt.Schema.Value
			parts = append(parts, "body")
		}
	}
	breakPart := ""
	if broken && len(parts) > 0 {
		breakPart = parts[f.rng.IntN(len(parts))]
	}
	for _, p := range op.params {
		if p.Value.In != "path" {
			continue
		}
		v := f.pathValue(op, p.Value, breakPart == "path:"+p.Value.Name)
		path = strings.Replace(path, "{"+p.Value.Name+"}", v, 1)
	}
	req.path = path
	q := []string{}
	for _, p := range query {
		bad := breakPart == "query:"+p.Name
		if !bad && f.rng.IntN(2) == 0 {
			continue // optional
		}
		v := f.value(p.Schema.Value, p.Name, !bad, 0)
		if bad {
			v = f.badScalar(p.Schema.Value, p.Name)
		}
		q = append(q, url.QueryEscape(p.Name)+"="+url.QueryEscape(scalarText(v)))
	}
	req.query = strings.Join(q, "&")
	if body != nil {
		req.contentType = "application/json"
		if breakPart == "body" {
			req.body = f.badBody(body)
		} else {
			b, _ := json.Marshal(f.value(body, "", true, 0))
			req.body = b
		}
	}
	if broken && breakPart == "" {
		// An operation without parameters or body: send it one anyway, or junk query.
		if f.rng.IntN(2) == 0 {
			req.body, req.contentType = []byte(`{"unexpected": true}`), "application/json"
		} else {
			req.query = "limit=-1&x=%00"
		}
	}
	return req
}

func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// pathValue picks a path parameter: a fixture, a fresh valid value, or a broken one.
func (f *specFuzzer) pathValue(op operation, p *openapi3.Parameter, bad bool) string {
	if bad {
		choices := []string{"%00", "a%00b", "%ff", strings.Repeat("x", 700), "-1", "0", "abc", "1.5",
			"99999999999999999999", "bad%20name", "%2F", "..", "%E2%80%AE"}
		return choices[f.rng.IntN(len(choices))]
	}
	// Never delete the fixtures: later operations need them.
	fresh := op.method == "DELETE" || f.rng.IntN(3) == 0
	switch p.Name {
	case "id":
		if strings.HasPrefix(op.path, "/v1/api-keys") || fresh {
			return strconv.Itoa(1 + f.rng.IntN(1000000))
		}
		return strconv.FormatInt(f.jobID, 10)
	case "name":
		if fresh {
			return f.name()
		}
		switch {
		case strings.HasPrefix(op.path, "/v1/rate-limits"):
			return "r"
		case strings.HasPrefix(op.path, "/v1/queues"):
			return "q"
		default:
			return "h"
		}
	case "key":
		if fresh {
			return url.PathEscape(f.name())
		}
		return "g"
	}
	return "x"
}

func (f *specFuzzer) name() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_.:-"
	n := 1 + f.rng.IntN(20)
	b := []byte{alphabet[f.rng.IntN(36)]}
	for range n - 1 {
		b = append(b, alphabet[f.rng.IntN(len(alphabet))])
	}
	return string(b)
}

var durations = []string{"0s", "500ms", "30s", "1h", "1h30m", "2.5s", "10us", "24h", "720h"}

// value generates a value for schema s (field is the property name, for the few fields
// whose meaning the schema's pattern does not capture).
func (f *specFuzzer) value(s *openapi3.Schema, field string, valid bool, depth int) any {
	if s == nil || depth > 6 {
		return nil
	}
	if len(s.AllOf) > 0 && s.Type.IsEmpty() {
		return f.value(s.AllOf[0].Value, field, valid, depth+1)
	}
	if len(s.Enum) > 0 {
		return s.Enum[f.rng.IntN(len(s.Enum))]
	}
	switch {
	case s.Type.Is("object") || len(s.Properties) > 0:
		out := map[string]any{}
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if !slices.Contains(s.Required, n) && f.rng.IntN(2) == 0 {
				continue
			}
			out[n] = f.value(s.Properties[n].Value, n, valid, depth+1)
		}
		if field == "" && slices.Contains(names, "run_at") && slices.Contains(names, "delay") {
			delete(out, "run_at") // one of the two
		}
		if slices.Contains(names, "token") {
			out["token"] = randomUUID(f.rng)
		}
		// The outcome of an asynchronous step holds exactly one answer.
		if slices.Contains(names, "next") && slices.Contains(names, "retry") {
			for _, k := range []string{"next", "await", "spawn", "done", "fail", "retry"} {
				delete(out, k)
			}
			answer := []string{"next", "await", "spawn", "done", "fail", "retry"}[f.rng.IntN(6)]
			out[answer] = map[string]any{}
			if answer == "spawn" { // a child in a queue nothing has used: a refused spawn must not create it
				out[answer] = map[string]any{"children": []any{map[string]any{"handler": "h", "queue": f.name()}}}
			}
		}
		return out
	case s.Type.Is("array"):
		n := int(s.MinItems) + f.rng.IntN(3)
		if s.MaxItems != nil && uint64(n) > *s.MaxItems {
			n = int(*s.MaxItems)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = f.value(s.Items.Value, field, valid, depth+1)
		}
		return out
	case s.Type.Is("string"):
		return f.stringValue(s, field)
	case s.Type.Is("integer"):
		lo, hi := 0.0, 1000.0
		if s.Min != nil {
			lo = *s.Min
		}
		if s.Max != nil && *s.Max < hi+lo {
			hi = *s.Max
		} else {
			hi = lo + 1000
		}
		if field == "weight" {
			hi = 2
		}
		return int64(lo) + int64(f.rng.IntN(int(hi-lo)+1))
	case s.Type.Is("number"):
		lo := 0.0
		if s.Min != nil {
			lo = *s.Min
		}
		return lo + float64(f.rng.IntN(100))
	case s.Type.Is("boolean"):
		return f.rng.IntN(2) == 0
	}
	// Any JSON value.
	return []any{map[string]any{"n": f.rng.IntN(100), "s": "text ü"}, []any{1, "two", nil}, "plain", 42.5, true}[f.rng.IntN(5)]
}

func (f *specFuzzer) stringValue(s *openapi3.Schema, field string) string {
	switch {
	case s.Format == "uuid":
		return randomUUID(f.rng)
	case s.Format == "date-time":
		return time.Now().Add(time.Duration(f.rng.IntN(3600)) * time.Second).UTC().Format(time.RFC3339)
	case strings.HasPrefix(s.Pattern, "^whsec_"):
		b := make([]byte, 24)
		for i := range b {
			b[i] = byte(f.rng.IntN(256))
		}
		return "whsec_" + base64.StdEncoding.EncodeToString(b)
	case strings.Contains(s.Pattern, "ns|us"):
		return durations[f.rng.IntN(len(durations))]
	case s.Pattern == "^[0-9]+$":
		return strconv.Itoa(f.rng.IntN(100000))
	case strings.HasPrefix(s.Pattern, "^[A-Za-z0-9]"):
		if field == "handler" {
			return "h"
		}
		if field == "name" && f.rng.IntN(2) == 0 {
			return "r" // the rate limit a job may name
		}
		return f.name()
	case field == "url":
		return "http://93.184.215.14/" + f.name()
	}
	if field == "key" && f.rng.IntN(3) == 0 {
		return "k" // the fixture job's key
	}
	n := 1 + f.rng.IntN(12)
	if s.MaxLength != nil && uint64(n) > *s.MaxLength {
		n = int(*s.MaxLength)
	}
	return string([]rune(strings.Repeat("ab€", n))[:n])
}

func randomUUID(rng *rand.Rand) string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// badScalar is a value the schema refuses (or that the server cannot store).
func (f *specFuzzer) badScalar(s *openapi3.Schema, field string) any {
	choices := []any{"\x00", "a\x00b", strings.Repeat("x", 100000), "\ufffd\ud7ff", -1, -9223372036854775808,
		"9223372036854775808", 1e308, 0.5, "", "  ", true, "null", "9999999999h", "-5s", "1e400"}
	if s != nil && s.Type.Is("string") {
		choices = append(choices, 12345, false)
	}
	return choices[f.rng.IntN(len(choices))]
}

// badBody is a body the request schema (or the server) refuses: one field broken, or
// the whole document.
func (f *specFuzzer) badBody(s *openapi3.Schema) []byte {
	whole := [][]byte{[]byte(`null`), []byte(`[]`), []byte(`"x"`), []byte(`{}`), []byte(`{"a":`), []byte(`{} {}`),
		[]byte(`{}]`), []byte(strings.Repeat("[", 20000)), []byte("{\"x\": \"\xff\"}"), []byte(`{"\u0000": 1}`), nil}
	if f.rng.IntN(5) == 0 {
		return whole[f.rng.IntN(len(whole))]
	}
	v := f.value(s, "", true, 0)
	f.breakValue(s, &v, 0)
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{`)
	}
	if f.rng.IntN(10) == 0 {
		b = append(b, []byte(" trailing")...)
	}
	return b
}

// breakValue breaks one thing inside v (a value of schema s).
func (f *specFuzzer) breakValue(s *openapi3.Schema, v *any, depth int) {
	if len(s.AllOf) > 0 && s.Type.IsEmpty() {
		s = s.AllOf[0].Value
	}
	obj, isObj := (*v).(map[string]any)
	arr, isArr := (*v).([]any)
	switch {
	case isObj && depth < 4:
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		slices.Sort(names)
		switch k := f.rng.IntN(6); {
		case k == 0 && len(s.Required) > 0:
			delete(obj, s.Required[f.rng.IntN(len(s.Required))])
			return
		case k == 1:
			obj["unknown_"+f.name()] = 1
			return
		case len(names) > 0:
			n := names[f.rng.IntN(len(names))]
			child, ok := obj[n]
			if !ok {
				child = f.value(s.Properties[n].Value, n, true, depth+1)
			}
			f.breakValue(s.Properties[n].Value, &child, depth+1)
			obj[n] = child
			return
		}
	case isArr && len(arr) > 0 && s.Items != nil && depth < 4:
		i := f.rng.IntN(len(arr))
		f.breakValue(s.Items.Value, &arr[i], depth+1)
		return
	}
	if s.Type.Is("string") && strings.Contains(s.Pattern, "ns|us") && f.rng.IntN(2) == 0 {
		*v = []string{"9999999999h", "99999999999999999999ns", "2562048h", "-1s", "1.5.5s"}[f.rng.IntN(5)]
		return
	}
	if s.Type.IsEmpty() && f.rng.IntN(2) == 0 {
		// Any JSON: what jsonb cannot store.
		*v = []any{"\x00", map[string]any{"k\x00": 1}, []any{"ok", "x\x00y"}}[f.rng.IntN(3)]
		return
	}
	*v = f.badScalar(s, "")
}

// send sends one request and checks the answer.
func (f *specFuzzer) send(op operation, fr fuzzRequest) {
	t := f.t
	f.requests++
	f.perOp[op.method+" "+op.path]++
	target := f.a.url + fr.path
	if fr.query != "" {
		target += "?" + fr.query
	}
	before := f.fingerprint()
	req, err := http.NewRequest(fr.method, target, strings.NewReader(string(fr.body)))
	if err != nil {
		t.Fatalf("%s %s: %v", fr.method, target, err)
	}
	if fr.contentType != "" {
		req.Header.Set("Content-Type", fr.contentType)
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", fr.method, target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	class := resp.StatusCode / 100
	if class < len(f.byClass) {
		f.byClass[class]++
	}
	show := func() string {
		b := string(fr.body)
		if len(b) > 300 {
			b = b[:300] + "…"
		}
		return fmt.Sprintf("%s %s body %q -> %d %.300s", fr.method, fr.path+"?"+fr.query, b, resp.StatusCode, body)
	}
	if class == 5 {
		t.Errorf("5xx: %s", show())
	}
	probe, _ := http.NewRequest(fr.method, target, nil)
	if msg := responseMismatch(specRoutes(t), probe, resp.StatusCode, resp.Header, body); msg != "" {
		f.mismatches++
		if f.mismatches <= 20 {
			t.Errorf("spec mismatch: %s: %s", show(), msg)
		}
	}
	if class == 4 {
		if after := f.fingerprint(); after != before {
			f.wroteOn4xx++
			t.Errorf("a %d wrote: %s\nbefore %s\nafter  %s", resp.StatusCode, show(), before, after)
		}
	}
}
