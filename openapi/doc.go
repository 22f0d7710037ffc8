// Package openapi owns the OpenAPI 3.1 document of kvindex's HTTP API (openapi.yaml): every
// route of the server's route table (server/http.go) with its parameters, request bodies and
// answers, errors included. The server serves it as JSON at GET /openapi.json; clients generate
// from it.
//
// Invariants: every route of the server's table is a path of the document
// (server.TestOpenAPICoversEveryRoute), and every request and answer of the end-to-end, README,
// server, library, natsrc and offline tests validates against it (testutil/openapitest). The document is extended, never broken,
// as docs/API.md is.
package openapi
