// Object storage: preview a parquet object (StorageService.ParquetPreview:
// the service reads only the footer and the row groups it needs), and upload
// a file to a group through a presigned URL. The upload goes straight to S3
// (not to this API), with XMLHttpRequest for its progress events.
import { api, describeError } from "./api.js";
import { h, status, table } from "./dom.js";

const PREVIEW_ROWS = 50;

function put(url: string, file: File, progress: HTMLProgressElement): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    if (file.type !== "") xhr.setRequestHeader("content-type", file.type);
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) {
        progress.max = e.total;
        progress.value = e.loaded;
      }
    });
    xhr.addEventListener("load", () =>
      xhr.status >= 200 && xhr.status < 300 ? resolve() : reject(new Error(`S3 answered ${xhr.status}`)),
    );
    xhr.addEventListener("error", () => reject(new Error("the upload failed (network or CORS on the bucket)")));
    xhr.send(file);
  });
}

export function createStorage(): HTMLElement {
  const pathIn = h("input", {
    id: "pq-path",
    type: "text",
    placeholder: "s3://bucket/key.parquet",
    size: 50,
    spellcheck: "false",
  });
  const previewNote = h("p", { class: "status", role: "status" });
  const previewOut = h("div", { class: "preview-out" });

  async function preview(): Promise<void> {
    const path = pathIn.value.trim();
    if (path === "") return status(previewNote, "Enter an s3:// path", "error");
    status(previewNote, "Reading…");
    try {
      const res = await api.storage.parquetPreview({ path, limit: PREVIEW_ROWS });
      status(
        previewNote,
        `${String(res.totalRows)} rows in the object; showing ${String(res.returnedRows)}. Columns: ${res.schema.map((c) => `${c.name} (${c.type})`).join(", ")}`,
      );
      previewOut.replaceChildren(table(res.columns, res.data, `Preview of ${path}`));
    } catch (err) {
      previewOut.replaceChildren();
      status(previewNote, describeError(err), "error");
    }
  }

  const groupIn = h("input", { id: "up-group", type: "text", value: "uploads", spellcheck: "false" });
  const fileIn = h("input", { id: "up-file", type: "file" });
  const progress = h("progress", { id: "up-progress", max: 1, value: 0 });
  const uploadNote = h("p", { class: "status", role: "status" });
  const uploaded = h("div", { class: "uploaded" });

  async function upload(): Promise<void> {
    const file = fileIn.files?.[0];
    if (file === undefined) return status(uploadNote, "Choose a file", "error");
    progress.value = 0;
    status(uploadNote, `Uploading ${file.name}…`);
    try {
      const signed = await api.storage.presign({
        direction: "upload",
        filename: file.name,
        group: groupIn.value.trim(),
      });
      await put(signed.url, file, progress);
      progress.max = 1;
      progress.value = 1;
      const path = signed.path ?? "";
      status(uploadNote, `Uploaded ${file.size} bytes to ${path}`);
      const use = h(
        "button",
        {
          type: "button",
          class: "link",
          onclick: () => {
            pathIn.value = path;
            void preview();
          },
        },
        "Preview it",
      );
      uploaded.replaceChildren(
        h("code", { class: "uploaded-path" }, path),
        " ",
        ...(/\.parquet$/i.test(file.name) ? [use] : []),
      );
    } catch (err) {
      status(uploadNote, err instanceof Error && !("code" in err) ? err.message : describeError(err), "error");
    }
  }

  return h(
    "section",
    { class: "panel storage-panel", "aria-labelledby": "storage-h" },
    h("h2", { id: "storage-h" }, "Object storage"),
    h(
      "form",
      {
        class: "row",
        onsubmit: (e: Event) => {
          e.preventDefault();
          void upload();
        },
      },
      h("label", { for: "up-group" }, "Group"),
      groupIn,
      h("label", { for: "up-file" }, "File"),
      fileIn,
      h("button", { type: "submit" }, "Upload"),
      h("label", { for: "up-progress", class: "sr-only" }, "Upload progress"),
      progress,
    ),
    uploadNote,
    uploaded,
    h(
      "form",
      {
        class: "row",
        onsubmit: (e: Event) => {
          e.preventDefault();
          void preview();
        },
      },
      h("label", { for: "pq-path" }, "Parquet object"),
      pathIn,
      h("button", { type: "submit" }, "Preview"),
    ),
    previewNote,
    previewOut,
  );
}
