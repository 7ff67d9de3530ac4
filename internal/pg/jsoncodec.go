package pg

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// rawJSONUnmarshal is json.Unmarshal with a fast path for json.RawMessage, the type
// every jsonb column is read into. pgx hands a jsonb value to its codec's Unmarshal as
// PostgreSQL wrote it, which is valid JSON with no space around it, so a copy is the
// value encoding/json would make, without encoding/json's validating scan: that scan was
// 4 ms of server CPU in a 5 000-job batch insert, which reads each job's input back
// (TestJSONBReadsAsEncodingJSONWould).
func rawJSONUnmarshal(data []byte, v any) error {
	if m, ok := v.(*json.RawMessage); ok {
		*m = append(json.RawMessage(nil), data...)
		return nil
	}
	return json.Unmarshal(data, v)
}

// registerJSONB makes conn read jsonb through rawJSONUnmarshal.
func registerJSONB(_ context.Context, conn *pgx.Conn) error {
	conn.TypeMap().RegisterType(&pgtype.Type{Name: "jsonb", OID: pgtype.JSONBOID,
		Codec: &pgtype.JSONBCodec{Marshal: json.Marshal, Unmarshal: rawJSONUnmarshal}})
	return nil
}
