// Package openapitest checks HTTP exchanges against kvindex's OpenAPI document (package
// openapi) with kin-openapi's openapi3filter, so tests that talk to a server also test the
// contract clients are generated from.
//
// Transport is an http.RoundTripper over another one; Install puts it under http.DefaultClient
// (and every client without a transport of its own), and Run does so for a whole test binary
// (`func TestMain(m *testing.M) { os.Exit(openapitest.Run(m)) }`). Each exchange is checked by
// Validator.Check, with the bodies decoded as the server decodes them (gzip undone, no
// Content-Type and curl's form type read as JSON, NDJSON a line at a time, msgpack):
//
//   - the route must be an operation of the document, unless the server answered it 404 or 405
//     (then the answer must be the error JSON);
//   - a request the document refuses must be refused by the server (4xx): a request the contract
//     calls invalid and the server accepts means one of them is wrong;
//   - the answer must match the document's answer for its status (the `default` error answer for
//     an undocumented status), its content type, headers and body schema, with no field the
//     document does not describe (strictAnswers closes the answers' object schemas; schemas
//     marked x-kvindex-open stay open).
//
// A violation is returned by RoundTrip as an error naming the route, the status and what does
// not conform (so the test that made the request fails there), and kept for Violations, which a
// TestMain reports after the tests (a violation inside a retry loop that ignores errors is not
// lost). Bodies are read whole before RoundTrip returns.
package openapitest
