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
//   pathsInfo {paths, expand, revision}
//                                   -> [{path, type, oid, size, lfs, xetHash,
//                                       lastCommit: {id, title, date}}]
//   listCommits {revision, batchSize} -> [{oid, title, message, authors, date}]
//   countCommits {revision}         -> a number
//   modelInfo / datasetInfo {revision} -> {id, name, sha, files} (sha and
//                                      the file paths asked as additionalFields)
//   snapshotDownload {cacheDir, revision}
//                                   -> {folder, files: {path: sha256 hex}}
//   downloadFile {path, revision}
//   downloadFileToCacheDir {cacheDir, path, revision}
//                                   -> {pointer, sha256}
// Output, one line: {"ok": true, "result": ...} or, when the client threw,
//   {"ok": false, "name": "HubApiError", "message": "<what the client
//    shows>", "status": 403, "requestId": "...", "requests": [...]}
//
// Every request goes through a fetch that refuses any host but 127.0.0.1 /
// localhost, as in roundtrip.mjs.

import { createHash, randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import {
	countCommits,
	datasetInfo,
	downloadFile,
	downloadFileToCacheDir,
	fileExists,
	listCommits,
	listDatasets,
	listModels,
	modelInfo,
	pathsInfo,
	snapshotDownload,
	uploadFiles,
	whoAmI,
} from "@huggingface/hub";

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

async function sha256Of(path) {
	return createHash("sha256").update(await readFile(path)).digest("hex");
}

// filesUnder maps each file under dir (symlinks followed) to its sha256.
async function filesUnder(dir) {
	const out = {};
	for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
		const full = join(e.parentPath ?? e.path, e.name);
		if (e.isFile() || e.isSymbolicLink()) {
			out[relative(dir, full)] = await sha256Of(full);
		}
	}
	return out;
}

async function run(a) {
	const creds = { accessToken: a.token || undefined, hubUrl: a.hubUrl, fetch: localFetch };
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
		case "pathsInfo":
			return (await pathsInfo({ ...creds, repo, paths: a.paths, expand: a.expand, revision: a.revision })).map((p) => ({
				...p,
				lastCommit: p.lastCommit && { ...p.lastCommit, date: p.lastCommit.date.toISOString() },
			}));
		case "listCommits": {
			const out = [];
			for await (const c of listCommits({ ...creds, repo, revision: a.revision, batchSize: a.batchSize })) {
				out.push({ ...c, date: c.date.toISOString() });
			}
			return out;
		}
		case "countCommits":
			return countCommits({ ...creds, repo, revision: a.revision });
		case "modelInfo":
		case "datasetInfo": {
			// modelInfo derives filePaths from siblings; datasetInfo passes
			// the raw siblings through.
			const model = a.op === "modelInfo";
			const info = await (model ? modelInfo : datasetInfo)({
				...creds,
				name: a.repo,
				revision: a.revision,
				additionalFields: ["sha", model ? "filePaths" : "siblings"],
			});
			const files = model ? info.filePaths : info.siblings?.map((s) => s.rfilename);
			return { id: info.id, name: info.name, sha: info.sha, files };
		}
		case "snapshotDownload": {
			const folder = await snapshotDownload({ ...creds, repo, cacheDir: a.cacheDir, revision: a.revision });
			return { folder, files: await filesUnder(folder) };
		}
		case "downloadFile": {
			const blob = await downloadFile({ ...creds, repo, path: a.path, revision: a.revision });
			if (blob === null) {
				return { missing: true };
			}
			const bytes = Buffer.from(await blob.arrayBuffer());
			return { size: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
		}
		case "downloadFileToCacheDir": {
			const pointer = await downloadFileToCacheDir({ ...creds, repo, path: a.path, cacheDir: a.cacheDir, revision: a.revision });
			return { pointer, sha256: await sha256Of(pointer) };
		}
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
