// Sample payloads per payload type, as proto3 JSON in REST (snake_case) field
// names. Shared by the JSON Schema tests and the validation tests, so that the
// schemas and the service's validation can be checked to agree.
import type { JsonObject } from "@bufbuild/protobuf";

export interface InvalidSample {
  /** What is wrong with it, for test names. */
  readonly why: string;
  readonly payload: JsonObject;
}

export const validSamples: Readonly<Record<string, readonly JsonObject[]>> = {
  datasource: [
    { name: "Hospital A" },
    { name: "Trial B", description: "phase II", institution: "University Hospital", country: "DE" },
  ],
  patient: [
    { datasource_id: "ds1" },
    { datasource_id: "ds1", sex: "female", birth_year: 1970 },
    { datasource_id: "ds2", sex: "unknown", birth_year: -2147483648 },
  ],
  study: [
    {},
    { study_date: "2024-02-29", modality: "CT", description: "chest", body_part: "CHEST", accession_number: "A1" },
  ],
  series: [{}, { modality: "MR", series_number: 3, description: "T1", instance_count: 2147483647 }],
  file: [
    { path: "s3://bucket/key.dcm" },
    {
      path: "s3://bucket/a/b.nii.gz",
      size_bytes: "9223372036854775807",
      content_type: "application/gzip",
      sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    },
    { path: "s3://bucket/c", size_bytes: 1024 },
    { path: "s3://bucket/d", size_bytes: "-9223372036854775808" },
  ],
  annotation: [
    { label: "tumour" },
    { label: "volume", value: 12.5, text: "measured", annotator: "rater1" },
    { label: "nan", value: "NaN" },
    { label: "inf", value: "-Infinity" },
  ],
  artefact: [
    { repo: "org/model", branch: "main", path: "models/unet.onnx", status: "pending" },
    {
      repo: "org/model",
      branch: "dev",
      path: "models/unet.onnx",
      commit: "abc123",
      status: "succeeded",
      uri: "s3://bucket/models/unet.onnx",
      metrics: { dice: 0.91, loss: "Infinity" },
    },
  ],
  dataset: [
    { name: "cohort" },
    { name: "cohort", description: "all CT", path: "s3://bucket/cohort.parquet", row_count: "42" },
    { name: "cohort", row_count: 0 },
  ],
};

export const invalidSamples: Readonly<Record<string, readonly InvalidSample[]>> = {
  datasource: [
    { why: "missing required name", payload: { description: "no name" } },
    { why: "name of the wrong type", payload: { name: 42 } },
    { why: "unknown key", payload: { name: "A", city: "Berlin" } },
    { why: "country not two capital letters", payload: { name: "A", country: "de" } },
    { why: "country too long", payload: { name: "A", country: "DEU" } },
  ],
  patient: [
    { why: "missing required datasource_id", payload: { sex: "male" } },
    { why: "sex not in the list", payload: { datasource_id: "ds1", sex: "F" } },
    { why: "birth_year a fraction", payload: { datasource_id: "ds1", birth_year: 1970.5 } },
    { why: "birth_year beyond int32", payload: { datasource_id: "ds1", birth_year: 2147483648 } },
    { why: "birth_year a string", payload: { datasource_id: "ds1", birth_year: "1970x" } },
    { why: "unknown key", payload: { datasource_id: "ds1", age: 50 } },
  ],
  study: [
    { why: "study_date not a real date", payload: { study_date: "2026-02-30" } },
    { why: "study_date not YYYY-MM-DD", payload: { study_date: "2026-1-5" } },
    { why: "modality of the wrong type", payload: { modality: ["CT"] } },
    { why: "unknown key", payload: { patient_name: "x" } },
  ],
  series: [
    { why: "series_number a string", payload: { series_number: "three" } },
    { why: "instance_count below int32", payload: { instance_count: -2147483649 } },
    { why: "unknown key", payload: { slices: 3 } },
  ],
  file: [
    { why: "missing required path", payload: { size_bytes: "1" } },
    { why: "path not s3://", payload: { path: "/local/file" } },
    {
      why: "sha256 upper case",
      payload: { path: "s3://b/k", sha256: "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF" },
    },
    { why: "sha256 too short", payload: { path: "s3://b/k", sha256: "abc" } },
    { why: "size_bytes beyond int64", payload: { path: "s3://b/k", size_bytes: "9223372036854775808" } },
    { why: "size_bytes below int64", payload: { path: "s3://b/k", size_bytes: "-9223372036854775809" } },
    { why: "size_bytes not decimal", payload: { path: "s3://b/k", size_bytes: "12kB" } },
    { why: "size_bytes a fraction", payload: { path: "s3://b/k", size_bytes: 1.5 } },
    { why: "unknown key", payload: { path: "s3://b/k", bucket: "b" } },
  ],
  annotation: [
    { why: "missing required label", payload: { value: 1 } },
    { why: "value a non-number string", payload: { label: "x", value: "nan" } },
    { why: "value a boolean", payload: { label: "x", value: true } },
    { why: "unknown key", payload: { label: "x", unit: "mm" } },
  ],
  artefact: [
    { why: "missing required status", payload: { repo: "r", branch: "main", path: "m.onnx" } },
    { why: "missing required branch", payload: { repo: "r", path: "m.onnx", status: "failed" } },
    { why: "status not in the list", payload: { repo: "r", branch: "main", path: "m.onnx", status: "done" } },
    { why: "uri not s3://", payload: { repo: "r", branch: "main", path: "m.onnx", status: "failed", uri: "http://x" } },
    {
      why: "metrics value a string",
      payload: { repo: "r", branch: "main", path: "m.onnx", status: "running", metrics: { dice: "high" } },
    },
    {
      why: "metrics not an object",
      payload: { repo: "r", branch: "main", path: "m.onnx", status: "running", metrics: [0.5] },
    },
    { why: "unknown key", payload: { repo: "r", branch: "main", path: "m.onnx", status: "running", owner: "me" } },
  ],
  dataset: [
    { why: "missing required name", payload: { path: "s3://b/d.parquet" } },
    { why: "path not s3://", payload: { name: "d", path: "file:///d.parquet" } },
    { why: "row_count a fraction string", payload: { name: "d", row_count: "1.0" } },
    { why: "unknown key", payload: { name: "d", rows: 1 } },
  ],
};
