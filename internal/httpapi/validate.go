package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// validator checks every request against openapi.yaml before a handler runs and answers
// a problem that names each bad field; the body is size-limited before it is read.
type validator struct {
	router routers.Router
	limits bodyLimits
	errs   errorMapper
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
	return &validator{router: router, limits: limits, errs: errs}, nil
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
			if errors.Is(err, routers.ErrMethodNotAllowed) {
				writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
					r.Method+" is not allowed on "+r.URL.Path, nil)
				return
			}
			writeProblem(w, http.StatusNotFound, "not-found", "Not found", "no route for "+r.URL.Path, nil)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			v.reject(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
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
