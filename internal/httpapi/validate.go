package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gendurable/gendurable/internal/engine"
)

// validator checks every request against openapi.yaml before a handler runs and answers
// a problem that names each bad field; the body is size-limited before it is read.
type validator struct {
	router routers.Router
	limits bodyLimits
	errs   errorMapper
	// acceptors judge valid bodies in one pass (bodyAcceptor), by request body schema.
	acceptors map[*openapi3.Schema]*bodyAcceptor
}

type bodyLimits struct {
	regular, batch int64
}

func newValidator(limits bodyLimits, errs errorMapper) (*validator, error) {
	doc, err := GetSwagger()
	if err != nil {
		return nil, err
	}
	// A spec that does not validate would validate requests against a schema other than
	// the one written (a YAML slip once turned a description into three schema keys).
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.yaml does not validate: %w", err)
	}
	doc.Servers = nil // match any host
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &validator{router: router, limits: limits, errs: errs, acceptors: bodyAcceptors(doc)}, nil
}

// bodyAcceptors compiles a bodyAcceptor for each JSON request body schema of doc.
func bodyAcceptors(doc *openapi3.T) map[*openapi3.Schema]*bodyAcceptor {
	acceptors := map[*openapi3.Schema]*bodyAcceptor{}
	if doc.IsOpenAPI31OrLater() {
		return acceptors // JSON Schema 2020-12 semantics: kin-openapi alone
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			for _, mt := range op.RequestBody.Value.Content {
				if mt.Schema != nil && mt.Schema.Value != nil && acceptors[mt.Schema.Value] == nil {
					acceptors[mt.Schema.Value] = newBodyAcceptor(mt.Schema.Value)
				}
			}
		}
	}
	return acceptors
}

// bodyAccepted says the body is valid for the route by the one-pass acceptor, so that
// kin-openapi need not decode and visit it (it still checks the parameters).
func (v *validator) bodyAccepted(r *http.Request, route *routers.Route, body []byte) bool {
	if route.Operation == nil || route.Operation.RequestBody == nil || route.Operation.RequestBody.Value == nil {
		return false
	}
	mt := route.Operation.RequestBody.Value.Content.Get(r.Header.Get("Content-Type"))
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return false
	}
	a := v.acceptors[mt.Schema.Value]
	return a != nil && a.accepts(body)
}

// readBody reads the (size-limited) body whole, into one buffer of its declared length
// when it has one: io.ReadAll grew a 5 000-job batch's buffer a dozen times.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength) // within the limit: checked before
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

func (v *validator) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := v.limits.regular
		if r.URL.Path == "/v1/jobs/batch" {
			limit = v.limits.batch
		}
		if r.ContentLength > limit {
			v.errs.write(w, r, &http.MaxBytesError{Limit: limit})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		route, params, err := v.router.FindRoute(r)
		if err != nil {
			v.unrouted(w, r)
			return
		}
		fields := textFields(r, route, params)
		bodyValid := false
		if r.Body != nil && r.Body != http.NoBody {
			body, err := readBody(r)
			if err != nil {
				v.errs.write(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if malformed := checkJSON(body); malformed != "" {
				writeProblem(w, http.StatusBadRequest, "malformed", "The body is not valid JSON", malformed, nil)
				return
			}
			fields = append(fields, storableJSON(body)...)
			bodyValid = len(fields) == 0 && v.bodyAccepted(r, route, body)
		}
		if len(fields) > 0 {
			writeProblem(w, http.StatusUnprocessableEntity, "validation", "The request is not valid", summarize(fields), fields)
			return
		}
		checked := r
		if bodyValid {
			// kin-openapi's security check reads the body whole to give each
			// authentication function its copy (1 MB for a 5 000-job batch), and ours
			// reads nothing: it sees the request without the body it no longer checks.
			checked = r.WithContext(r.Context())
			checked.Body = http.NoBody
		}
		in := &openapi3filter.RequestValidationInput{Request: checked, PathParams: params, Route: route,
			// Defaults are the engine's to apply: setting them would re-encode every body.
			Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
				SkipSettingDefaults: true, ExcludeRequestBody: bodyValid}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			v.reject(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowed lists the methods openapi.yaml defines for the request's path (none for a
// path it does not know).
func (v *validator) allowed(r *http.Request) []string {
	var methods []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodPatch, http.MethodPost, http.MethodPut} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, _, err := v.router.FindRoute(probe); err == nil {
			methods = append(methods, m)
		}
	}
	return methods
}

// unrouted answers a request that matches no operation: 405 with Allow for a known path
// and a wrong method, 404 otherwise.
func (v *validator) unrouted(w http.ResponseWriter, r *http.Request) {
	if allow := v.allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
			r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+strings.Join(allow, ", "), nil)
		return
	}
	writeProblem(w, http.StatusNotFound, "not-found", "Not found", "no route for "+r.Method+" "+r.URL.Path, nil)
}

// textFields refuses path and query values PostgreSQL cannot store as text: a NUL
// character or bytes that are not UTF-8 (either would reach the database and fail
// there). Query parameters the operation does not declare are ignored, as the server
// ignores them.
func textFields(r *http.Request, route *routers.Route, params map[string]string) []FieldError {
	var fields []FieldError
	check := func(field, s string) {
		if msg := engine.UnstorableText(s); msg != "" {
			fields = append(fields, FieldError{Field: field, Message: msg})
		}
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := params[name]
		if unescaped, err := url.PathUnescape(value); err == nil {
			value = unescaped // the router may answer the path's escaped form
		}
		check("path/"+name, value)
	}
	query := r.URL.Query()
	var declared openapi3.Parameters
	if route.PathItem != nil {
		declared = append(declared, route.PathItem.Parameters...)
	}
	if route.Operation != nil {
		declared = append(declared, route.Operation.Parameters...)
	}
	for _, p := range declared {
		if p.Value == nil || p.Value.In != openapi3.ParameterInQuery {
			continue
		}
		for _, value := range query[p.Value.Name] {
			check("query/"+p.Value.Name, value)
		}
	}
	return fields
}

// checkJSON says why a request body is not one JSON value in UTF-8 ("" when it is);
// data after the value ("{}{}", "{} x") is refused rather than ignored.
func checkJSON(body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return "" // an absent body: the schema says whether one is required
	}
	if !utf8.Valid(body) {
		return "the body is not valid UTF-8"
	}
	if json.Valid(body) { // one value and nothing after it; the decoder below only explains
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return "the body is not valid JSON: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return "the body holds data after its JSON value"
	}
	return ""
}

// storableJSON finds the strings of a valid JSON body that PostgreSQL cannot store.
func storableJSON(body []byte) []FieldError {
	var fields []FieldError
	for _, f := range engine.UnstorableJSON(body, "") {
		fields = append(fields, FieldError{Field: f.Field, Message: f.Message})
	}
	return fields
}

// reject turns validation errors into one problem listing every field.
func (v *validator) reject(w http.ResponseWriter, r *http.Request, err error) {
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		v.errs.write(w, r, maxBytes)
		return
	}
	var fields []FieldError
	malformed := ""
	var walk func(error)
	walk = func(err error) {
		// A RequestError unwraps to its cause (often a MultiError of schema errors):
		// look for it first, or the field context is lost.
		reqErr, isReq := err.(*openapi3filter.RequestError)
		if !isReq {
			var multi openapi3.MultiError
			if errors.As(err, &multi) {
				for _, e := range multi {
					walk(e)
				}
				return
			}
			if !errors.As(err, &reqErr) {
				fields = append(fields, FieldError{Field: "request", Message: err.Error()})
				return
			}
		}
		prefix := "body"
		if reqErr.Parameter != nil {
			prefix = reqErr.Parameter.In + "/" + reqErr.Parameter.Name
		}
		var parseErr *openapi3filter.ParseError
		if errors.As(reqErr.Err, &parseErr) && reqErr.Parameter == nil {
			malformed = "the body is not valid JSON: " + parseErr.Error()
			return
		}
		var schemaErrs []*openapi3.SchemaError
		collectSchemaErrors(reqErr.Err, &schemaErrs)
		if len(schemaErrs) == 0 {
			msg := reqErr.Reason
			if reqErr.Err != nil {
				msg = strings.TrimSpace(msg + " " + reqErr.Err.Error())
			}
			if reqErr.RequestBody != nil && strings.Contains(msg, "value is required but missing") {
				msg = "a JSON body is required"
			}
			fields = append(fields, FieldError{Field: prefix, Message: msg})
			return
		}
		for _, se := range schemaErrs {
			fields = append(fields, schemaField(prefix, se))
		}
	}
	walk(err)
	if malformed != "" {
		writeProblem(w, http.StatusBadRequest, "malformed", "The body is not valid JSON", malformed, nil)
		return
	}
	writeProblem(w, http.StatusUnprocessableEntity, "validation", "The request is not valid",
		summarize(fields), fields)
}

func collectSchemaErrors(err error, out *[]*openapi3.SchemaError) {
	var multi openapi3.MultiError
	if errors.As(err, &multi) {
		for _, e := range multi {
			collectSchemaErrors(e, out)
		}
		return
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		*out = append(*out, se)
	}
}

var (
	unsupportedProperty = regexp.MustCompile(`property "([^"]+)" is unsupported`)
	missingProperty     = regexp.MustCompile(`property "([^"]+)" is missing`)
)

// schemaField names the field of a schema error: "jobs/3/priority" (body fields go
// without the "body/" prefix, parameters keep "query/limit").
func schemaField(prefix string, se *openapi3.SchemaError) FieldError {
	path := se.JSONPointer()
	reason := se.Reason
	if m := unsupportedProperty.FindStringSubmatch(reason); m != nil {
		path = append(path, m[1])
		reason = "is not a known field"
	} else if m := missingProperty.FindStringSubmatch(reason); m != nil {
		if len(path) == 0 || path[len(path)-1] != m[1] {
			path = append(path, m[1])
		}
		reason = "is required"
	}
	field := strings.Join(path, "/")
	if prefix != "body" {
		field = strings.TrimSuffix(prefix+"/"+field, "/")
	} else if field == "" {
		field = "body"
	}
	return FieldError{Field: field, Message: reason}
}

func summarize(fields []FieldError) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, fmt.Sprintf("%s: %s", f.Field, f.Message))
	}
	return strings.Join(parts, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
