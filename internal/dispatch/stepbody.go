package dispatch

import (
	"strconv"

	"github.com/gendurable/gendurable/internal/engine"
	"github.com/gendurable/gendurable/internal/jsonappend"
)

// appendStepBody appends the JSON body of a step's POST (the shape of webhook.StepRequest,
// as encoding/json writes it) to dst. It is written by hand because it runs once per step:
// encoding/json spends its time in reflection and in re-compacting the JSON values the
// database already produced, and allocates for both. Values taken from Postgres (input,
// state, payloads, results, errors) are valid JSON already and are copied as they are;
// strings are escaped as encoding/json escapes them. TestStepBodyMatchesEncodingJSON holds
// the two to the same JSON value.
func appendStepBody(dst []byte, st *engine.Step) []byte {
	dst = append(dst, `{"job":{"id":`...)
	dst = strconv.AppendInt(dst, st.ID, 10)
	dst = append(dst, `,"queue":`...)
	dst = jsonappend.String(dst, st.Queue)
	dst = append(dst, `,"handler":`...)
	dst = jsonappend.String(dst, st.Handler)
	dst = append(dst, `,"key":`...)
	if st.Key == nil {
		dst = append(dst, "null"...)
	} else {
		dst = jsonappend.String(dst, *st.Key)
	}
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, int64(st.Step), 10)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(st.Attempt), 10)
	dst = append(dst, `,"max_attempts":`...)
	dst = strconv.AppendInt(dst, int64(st.MaxAttempts), 10)
	dst = append(dst, `,"input":`...)
	dst = jsonappend.Raw(dst, st.Input)
	dst = append(dst, `,"state":`...)
	dst = jsonappend.Raw(dst, st.State)
	dst = append(dst, `,"created_at":`...)
	dst = jsonappend.Time(dst, st.CreatedAt)
	dst = append(dst, `},"signals":[`...)
	for i, s := range st.Signals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = strconv.AppendInt(dst, s.ID, 10)
		dst = append(dst, `,"name":`...)
		dst = jsonappend.String(dst, s.Name)
		dst = append(dst, `,"payload":`...)
		dst = jsonappend.Raw(dst, s.Payload)
		dst = append(dst, `,"created_at":`...)
		dst = jsonappend.Time(dst, s.CreatedAt)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if st.SignalsMore != 0 {
		dst = append(dst, `,"signals_more":`...)
		dst = strconv.AppendInt(dst, int64(st.SignalsMore), 10)
	}
	if len(st.Children) > 0 {
		dst = append(dst, `,"children":[`...)
		for i, c := range st.Children {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = strconv.AppendInt(dst, c.ID, 10)
			dst = append(dst, `,"handler":`...)
			dst = jsonappend.String(dst, c.Handler)
			dst = append(dst, `,"key":`...)
			if c.Key == nil {
				dst = append(dst, "null"...)
			} else {
				dst = jsonappend.String(dst, *c.Key)
			}
			dst = append(dst, `,"status":`...)
			dst = jsonappend.String(dst, c.Status)
			dst = append(dst, `,"result":`...)
			dst = jsonappend.Raw(dst, c.Result)
			dst = append(dst, `,"error":`...)
			dst = jsonappend.Raw(dst, c.Error)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if st.ChildrenMore != 0 {
		dst = append(dst, `,"children_more":`...)
		dst = strconv.AppendInt(dst, int64(st.ChildrenMore), 10)
	}
	dst = append(dst, `,"lease":{"token":`...)
	dst = jsonappend.String(dst, st.LeaseToken)
	dst = append(dst, `,"expires_at":`...)
	dst = jsonappend.Time(dst, st.LeaseExpiresAt)
	dst = append(dst, '}')
	if st.Wake != nil && *st.Wake != "" {
		dst = append(dst, `,"wake":`...)
		dst = jsonappend.String(dst, *st.Wake)
	}
	return append(dst, '}')
}
