package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// kinAccepts is kin-openapi's request-body verdict, as ValidateRequestBody reaches it
// (decoded with UseNumber, visited as a request with every error collected).
func kinAccepts(s *openapi3.Schema, body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	return s.VisitJSON(v, openapi3.VisitAsRequest(), openapi3.MultiErrors()) == nil
}

// requestBodySchemas lists every JSON request body schema of openapi.yaml by operation.
func requestBodySchemas(t *testing.T) map[string]*openapi3.Schema {
	doc, err := GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*openapi3.Schema{}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
				out[op.OperationID] = mt.Schema.Value
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d request body schemas", len(out))
	}
	return out
}

// The acceptor may only say yes where kin-openapi says yes: thousands of bodies per
// request schema of openapi.yaml, made from the schema and then broken in the ways
// hostile clients break them (wrong types, nulls, bounds, unknown and missing and
// repeated fields, escapes, numbers that are not plain integers).
func TestBodyAcceptorNeverAcceptsWhatKinOpenAPIRefuses(t *testing.T) {
	const bodiesPerSchema = 2000
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	ops := requestBodySchemas(t)
	names := make([]string, 0, len(ops))
	for name := range ops {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		schema := ops[name]
		acceptor := newBodyAcceptor(schema)
		accepted, valid := 0, 0
		for i := range bodiesPerSchema {
			g := bodyGen{rng: rng} // the even ones valid or nearly
			if i%2 == 1 {
				g.breakRate = rng.Float64() * 0.2
			}
			body := []byte(g.value(schema, 0))
			if !json.Valid(body) {
				t.Fatalf("%s: the generator made invalid JSON: %s", name, body)
			}
			kin := kinAccepts(schema, body)
			fast := acceptor.accepts(body)
			if fast && !kin {
				t.Fatalf("%s: the acceptor took a body kin-openapi refuses: %s", name, body)
			}
			if kin {
				valid++
			}
			if fast {
				accepted++
			}
		}
		t.Logf("%s: %d of %d bodies valid, the acceptor took %d of them", name, valid, bodiesPerSchema, accepted)
	}
}

// The acceptor walks the batch insert itself (the body it exists for) and takes every
// plainly valid batch: otherwise kin-openapi would still do the work.
func TestBodyAcceptorTakesValidBatches(t *testing.T) {
	t.Parallel()
	schema := requestBodySchemas(t)["InsertJobs"]
	if schema == nil {
		t.Fatal("no insertJobs request body")
	}
	acceptor := newBodyAcceptor(schema)
	if acceptor.root.kind != acceptObject || acceptor.root.props["jobs"].node.kind != acceptArray ||
		acceptor.root.props["jobs"].node.items.kind != acceptObject {
		t.Fatalf("the batch body is not walked (kinds %v)", acceptor.root.kind)
	}
	items := []string{
		`{"handler":"h"}`,
		`{"handler":"send-email","queue":"mail","input":{"to":"a@example.com","n":[1,2.5,null,{"x":"\u00e9"}]},"key":"k-1",
		  "priority":0,"delay":"1h30m","concurrency_key":"c","max_attempts":1000,"idempotency_key":"i"}`,
		`{"handler":"h","input":"text","run_at":"2026-12-01T12:00:00Z","rate_limit":{"name":"api","key":"u7","weight":2}}`,
		`{ "handler" : "h" , "input" : [ ] , "priority" : 9 }`,
	}
	for _, it := range items {
		body := []byte(`{"jobs":[` + it + `,` + it + `]}`)
		if !kinAccepts(schema, body) {
			t.Fatalf("kin-openapi refuses the test body %s", body)
		}
		if !acceptor.accepts(body) {
			t.Errorf("the acceptor refused a valid batch: %s", body)
		}
	}
}

// Hostile batches are refused by the acceptor (and so judged by kin-openapi, which
// writes the errors).
func TestBodyAcceptorRefusesBrokenBatches(t *testing.T) {
	t.Parallel()
	schema := requestBodySchemas(t)["InsertJobs"]
	acceptor := newBodyAcceptor(schema)
	over := `{"jobs":[` + strings.Repeat(`{"handler":"h"},`, 10000) + `{"handler":"h"}]}`
	for _, body := range []string{
		over,
		`{"jobs":[]}`,
		`{"jobs":[{"handler":"h"}],"extra":1}`,
		`{"jobs":[{"handler":"h","unknown":1}]}`,
		`{"jobs":[{"queue":"q"}]}`,
		`{"jobs":[{"handler":null}]}`,
		`{"jobs":[{"handler":"h","priority":"5"}]}`,
		`{"jobs":[{"handler":"h","priority":10}]}`,
		`{"jobs":[{"handler":"h","priority":-1}]}`,
		`{"jobs":[{"handler":"h","priority":5.5}]}`,
		`{"jobs":[{"handler":"h","input":null}]}`,
		`{"jobs":[{"handler":"bad name"}]}`,
		`{"jobs":[{"handler":"h","delay":"soon"}]}`,
		`{"jobs":[{"handler":"h","key":""}]}`,
		`{"jobs":[{"handler":"h","handler":"bad name"}]}`,
		`{"jobs":[{"h\u0061ndler":"h"}]}`,
		`{"jobs":[{"handler":"h","rate_limit":{"key":"k"}}]}`,
		`{"jobs":{"handler":"h"}}`,
		`[{"handler":"h"}]`,
		`null`,
	} {
		if acceptor.accepts([]byte(body)) {
			t.Errorf("the acceptor took %.120s", body)
		}
		if kinAccepts(schema, []byte(body)) && body != `{"jobs":[{"h\u0061ndler":"h"}]}` {
			t.Errorf("kin-openapi takes %.120s: the case tests nothing", body)
		}
	}
}

// bodyGen writes a JSON value for a schema, valid most of the time, broken at breakRate.
type bodyGen struct {
	rng       *rand.Rand
	breakRate float64
}

var (
	genStrings = []string{`"h"`, `"send-email"`, `"a:b.c_d-1"`, `"30s"`, `"1h30m"`, `"500ms"`, `"2026-12-01T12:00:00Z"`,
		`"2026-12-01T12:00:00.5+01:00"`, `"2026-13-01T12:00:00Z"`, `"2026-12-01 12:00:00"`, `""`, `" "`, `"-x"`,
		`"\u0068"`, `"\"q\""`, `"é"`, `"🙂"`, `"a\nb"`, `"runnable"`, `"done"`, `"skip"`, `"allow"`, `"Europe/Paris"`,
		`"*/5 * * * *"`, `"@every 30s"`, `"http://example.com/hook"`, `"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`,
		`"` + strings.Repeat("a", 128) + `"`, `"` + strings.Repeat("a", 129) + `"`, `"` + strings.Repeat("é", 512) + `"`,
		`"` + strings.Repeat("b", 513) + `"`, `"1e3"`, `"5"`}
	genNumbers = []string{`0`, `1`, `2`, `5`, `9`, `10`, `-1`, `100`, `1000`, `1001`, `10000`, `10001`, `1.0`, `1e2`,
		`5.5`, `-0`, `0.000`, `9007199254740993`, `1E400`, `3600000`, `86400`}
	genOthers = []string{`true`, `false`, `null`, `{}`, `[]`, `"x"`, `7`, `[null]`, `{"a":null}`}
)

func pick(rng *rand.Rand, pool []string) string { return pool[rng.IntN(len(pool))] }

func (g *bodyGen) broken() bool { return g.rng.Float64() < g.breakRate }

func (g *bodyGen) value(s *openapi3.Schema, depth int) string {
	if g.broken() || depth > 6 {
		return pick(g.rng, genOthers)
	}
	if len(s.Enum) > 0 && g.rng.IntN(4) > 0 {
		b, _ := json.Marshal(s.Enum[g.rng.IntN(len(s.Enum))])
		return string(b)
	}
	for _, alt := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
		if len(alt) > 0 && g.rng.IntN(2) == 0 {
			return g.value(alt[g.rng.IntN(len(alt))].Value, depth+1)
		}
	}
	switch {
	case s.Type.Is(openapi3.TypeObject) || len(s.Properties) > 0:
		return g.object(s, depth)
	case s.Type.Is(openapi3.TypeArray):
		n := int(s.MinItems) + g.rng.IntN(3)
		if s.MaxItems != nil && *s.MaxItems < 100 && g.rng.IntN(10) == 0 {
			n = int(*s.MaxItems) + 1 // just over the cap (the batch's 10 000 has its own test)
		}
		parts := make([]string, n)
		for i := range parts {
			if s.Items != nil {
				parts[i] = g.value(s.Items.Value, depth+1)
			} else {
				parts[i] = pick(g.rng, genOthers)
			}
		}
		return "[" + strings.Join(parts, ",") + "]"
	case s.Type.Is(openapi3.TypeString):
		return g.leaf(s, genStrings)
	case s.Type.Is(openapi3.TypeInteger), s.Type.Is(openapi3.TypeNumber):
		return g.leaf(s, genNumbers)
	case s.Type.Is(openapi3.TypeBoolean):
		return pick(g.rng, []string{`true`, `false`})
	}
	// No type (any JSON value): any of them, nested.
	switch g.rng.IntN(5) {
	case 0:
		return pick(g.rng, genStrings)
	case 1:
		return pick(g.rng, genNumbers)
	case 2:
		return fmt.Sprintf(`{"a":%s,"b":[%s,%s]}`, pick(g.rng, genOthers), pick(g.rng, genNumbers), pick(g.rng, genStrings))
	}
	return pick(g.rng, genOthers)
}

// leaf picks a scalar from pool; making a valid body (breakRate 0), one the schema
// takes when the pool has one.
func (g *bodyGen) leaf(s *openapi3.Schema, pool []string) string {
	v := pick(g.rng, pool)
	for try := 0; g.breakRate == 0 && try < 50 && !kinAccepts(s, []byte(v)); try++ {
		v = pick(g.rng, pool)
	}
	return v
}

func (g *bodyGen) object(s *openapi3.Schema, depth int) string {
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	var members []string
	for _, name := range names {
		include := required[name] || g.rng.IntN(2) == 0
		if g.broken() {
			include = !include // drops a required field, or adds one more
		}
		if include {
			members = append(members, fmt.Sprintf("%q:%s", name, g.value(s.Properties[name].Value, depth+1)))
		}
	}
	if g.broken() && len(members) > 0 {
		members = append(members, members[g.rng.IntN(len(members))]) // a repeated key
	}
	if g.broken() {
		members = append(members, `"unknown_field":1`)
	}
	if g.broken() && len(names) > 0 {
		// An escaped key that names a declared property.
		members = append(members, `"\u00`+fmt.Sprintf("%02x", names[0][0])+names[0][1:]+`":`+pick(g.rng, genOthers))
	}
	g.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return "{" + strings.Join(members, ",") + "}"
}

// FuzzBodyAcceptor: for any JSON body and any request schema of openapi.yaml, the
// acceptor never takes what kin-openapi refuses (make fuzz-short).
func FuzzBodyAcceptor(f *testing.F) {
	doc, err := GetSwagger()
	if err != nil {
		f.Fatal(err)
	}
	var schemas []*openapi3.Schema
	var names []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					schemas, names = append(schemas, mt.Schema.Value), append(names, op.OperationID)
				}
			}
		}
	}
	acceptors := make([]*bodyAcceptor, len(schemas))
	for i, s := range schemas {
		acceptors[i] = newBodyAcceptor(s)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 64 {
		g := bodyGen{rng: rng, breakRate: float64(i%4) * 0.05}
		f.Add(uint8(i), []byte(g.value(schemas[i%len(schemas)], 0)))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		if !json.Valid(body) {
			return // checkJSON refuses it before the acceptor is asked
		}
		i := int(which) % len(schemas)
		if acceptors[i].accepts(body) && !kinAccepts(schemas[i], body) {
			t.Fatalf("%s: the acceptor took a body kin-openapi refuses: %s", names[i], body)
		}
	})
}
