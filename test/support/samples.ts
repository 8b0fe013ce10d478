// One flat REST resource per payload type with every payload field set, so
// that a test that loops over them covers every field of every type.
export const fullSamples: Record<string, Record<string, unknown>> = {
  datasource: { name: "Hospital A", description: "CT archive", institution: "Uni Hospital", country: "DE" },
  patient: { datasource_id: "ds1", sex: "female", birth_year: 1970 },
  study: {
    study_date: "2024-02-29",
    modality: "CT",
    description: "Chest",
    body_part: "CHEST",
    accession_number: "ACC-1",
  },
  series: { modality: "CT", series_number: 3, description: "Axial", instance_count: 240 },
  file: {
    path: "s3://bucket/a/b.dcm",
    size_bytes: "9007199254740993",
    content_type: "application/dicom",
    sha256: "a".repeat(64),
  },
  annotation: { label: "nodule", value: 0.25, text: "left lower lobe", annotator: "rad1" },
  artefact: {
    repo: "org/models",
    branch: "main",
    path: "models/unet.onnx",
    commit: "abc123",
    status: "succeeded",
    uri: "s3://bucket/models/unet.onnx",
    metrics: { dice: 0.91, loss: 0.12 },
  },
  dataset: { name: "cohort", description: "all CTs", path: "s3://bucket/cohort.parquet", row_count: "123456789012" },
};
