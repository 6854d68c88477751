// Runs one @huggingface/hub call against openxet and prints its outcome as
// JSON, for the compat tests that check a single call (compat/test_js.py).
//
// Input on stdin: {"op": "<name>", "hubUrl": "http://127.0.0.1:PORT",
//                  "token": "hf_oxt_...", "repo": "ns/name",
//                  "repoType": "model"|"dataset", ...op arguments}
// Ops:
//   whoAmI                          -> the whoAmI answer
//   listModels / listDatasets       -> [{id, name, private, updatedAt}], with
//                                      "owner", "query", "limit" as search options
//   fileExists {path, revision}     -> true or false
//   uploadFiles {files: [{path, text} | {path, size}]}
//                                   -> the commit's oid
// Output, one line: {"ok": true, "result": ...} or, when the client threw,
//   {"ok": false, "name": "HubApiError", "message": "<what the client
//    shows>", "status": 403, "requestId": "...", "requests": [...]}
//
// Every request goes through a fetch that refuses any host but 127.0.0.1 /
// localhost, as in roundtrip.mjs.

import { randomBytes } from "node:crypto";
import { fileExists, listDatasets, listModels, uploadFiles, whoAmI } from "@huggingface/hub";

const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);
const requests = [];
const realFetch = globalThis.fetch;

async function localFetch(input, init) {
	const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
	const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
	if (!LOCAL_HOSTS.has(url.hostname)) {
		requests.push({ method, url: url.href, refused: true });
		throw new Error(`refused: the compat client only talks to 127.0.0.1, not ${url.href}`);
	}
	const resp = await realFetch(input, init);
	requests.push({ method, path: url.pathname + url.search, status: resp.status });
	return resp;
}
globalThis.fetch = localFetch;

async function collect(iter) {
	const out = [];
	for await (const e of iter) {
		out.push({ id: e.id, name: e.name, private: e.private, updatedAt: e.updatedAt?.toISOString?.() ?? null });
	}
	return out;
}

async function run(a) {
	const creds = { accessToken: a.token, hubUrl: a.hubUrl, fetch: localFetch };
	const repo = a.repo ? { type: a.repoType ?? "model", name: a.repo } : undefined;
	const search = { owner: a.owner, query: a.query };
	switch (a.op) {
		case "whoAmI":
			return whoAmI(creds);
		case "listModels":
			return collect(listModels({ ...creds, search, limit: a.limit }));
		case "listDatasets":
			return collect(listDatasets({ ...creds, search, limit: a.limit }));
		case "fileExists":
			return fileExists({ ...creds, repo, path: a.path, revision: a.revision });
		case "uploadFiles": {
			const files = a.files.map((f) => ({
				path: f.path,
				content: new Blob([f.text !== undefined ? Buffer.from(f.text) : randomBytes(f.size)]),
			}));
			const out = await uploadFiles({ ...creds, repo, files, commitTitle: "driver.mjs", useXet: true });
			return out?.commit?.oid ?? null;
		}
	}
	throw new Error(`unknown op ${a.op}`);
}

let input = "";
for await (const chunk of process.stdin) {
	input += chunk;
}
try {
	const result = await run(JSON.parse(input));
	process.stdout.write(JSON.stringify({ ok: true, result, requests }) + "\n");
} catch (e) {
	process.stdout.write(
		JSON.stringify({
			ok: false,
			name: e?.name ?? null,
			constructor: e?.constructor?.name ?? null,
			message: String(e?.message ?? e),
			status: e?.statusCode ?? null,
			requestId: e?.requestId ?? null,
			requests,
		}) + "\n",
	);
}
