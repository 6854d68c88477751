// Round trip through openxet with the stock @huggingface/hub client (pinned
// in package.json): create a repo, upload a small text file and a random
// binary large enough to go through Xet, download both with downloadFile
// (the Xet path), and compare sha256.
//
// Environment:
//   HUB_URL   openxet's base URL (http://127.0.0.1:PORT); passed as hubUrl
//   HF_TOKEN  an openxet credential token (hf_oxt_...)
//   REPO      "namespace/name"; the namespace is the credential's tenant
//   BIG_BYTES size of the binary file (default 3 MiB)
//   EMPTY     optional: a path; an empty (0-byte) file is committed there
//             too, and downloaded like the others
//   USE_XET   "0" uploads with useXet: false (the LFS basic transfer, as
//             @huggingface/hub <= 2.6 uploads by default); else useXet: true
//   EXPECT    optional: JSON [{"path", "sha256"}] of files already in REPO.
//             Then nothing is created or uploaded; those files are only
//             downloaded and compared.
//
// Every request goes through a fetch that refuses any host but 127.0.0.1 /
// localhost, so the client cannot reach huggingface.co or anything else.
// Prints one JSON object on stdout: {"ok": true, ...} or {"ok": false, "error"}.

import { createHash, randomBytes } from "node:crypto";
import { createRepo, downloadFile, fileDownloadInfo, listFiles, uploadFiles } from "@huggingface/hub";

const HUB_URL = process.env.HUB_URL;
const TOKEN = process.env.HF_TOKEN;
const REPO = process.env.REPO;
const BIG_BYTES = parseInt(process.env.BIG_BYTES ?? String(3 * 1024 * 1024), 10);

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
	requests.push({ method, path: url.pathname, status: resp.status });
	return resp;
}
// Also the global one, for any code path that ignores the fetch parameter.
globalThis.fetch = localFetch;

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

async function download(common, path) {
	const info = await fileDownloadInfo({ ...common, path });
	const blob = await downloadFile({ ...common, path, xet: true });
	if (blob === null) {
		throw new Error(`downloadFile(${path}) returned null (file not found)`);
	}
	const got = Buffer.from(await blob.arrayBuffer());
	return {
		path,
		downloaded_size: got.length,
		downloaded_sha256: sha256(got),
		xet: Boolean(info?.xet),
		xet_hash: info?.xet?.hash ?? null,
		blob_class: blob.constructor.name,
	};
}

async function downloadOnly(common, expect) {
	const files = [];
	for (const e of expect) {
		files.push({ ...(await download(common, e.path)), sha256: e.sha256 });
	}
	return { ok: files.every((f) => f.sha256 === f.downloaded_sha256), files };
}

async function main() {
	if (!HUB_URL || !TOKEN || !REPO) {
		throw new Error("set HUB_URL, HF_TOKEN and REPO");
	}
	const common = { repo: { type: "model", name: REPO }, accessToken: TOKEN, hubUrl: HUB_URL, fetch: localFetch };
	if (process.env.EXPECT) {
		return downloadOnly(common, JSON.parse(process.env.EXPECT));
	}

	const created = await createRepo({ ...common });

	const text = Buffer.from(
		Array.from({ length: 64 }, (_, i) => `line ${i}: openxet compat round trip from @huggingface/hub\n`).join(""),
	);
	const big = randomBytes(BIG_BYTES);
	const files = [
		{ path: "README.txt", bytes: text },
		{ path: "data/nested/random.bin", bytes: big },
	];
	if (process.env.EMPTY) {
		files.push({ path: process.env.EMPTY, bytes: Buffer.alloc(0) });
	}

	const commitOut = await uploadFiles({
		...common,
		files: files.map((f) => ({ path: f.path, content: new Blob([f.bytes]) })),
		commitTitle: "compat round trip",
		useXet: process.env.USE_XET !== "0",
	});

	const listed = [];
	for await (const entry of listFiles({ ...common, recursive: true })) {
		if (entry.type === "file") {
			listed.push({ path: entry.path, size: entry.size, xetHash: entry.xetHash ?? null });
		}
	}

	const results = [];
	for (const f of files) {
		results.push({ ...(await download(common, f.path)), size: f.bytes.length, sha256: sha256(f.bytes) });
	}

	const missing = await downloadFile({ ...common, path: "no/such/file.bin" });

	return {
		ok: results.every((r) => r.sha256 === r.downloaded_sha256 && r.size === r.downloaded_size),
		repo_url: created.repoUrl,
		commit: commitOut?.commit ?? null,
		listed,
		files: results,
		missing_is_null: missing === null,
	};
}

try {
	const out = await main();
	out.requests = requests;
	process.stdout.write(JSON.stringify(out) + "\n");
	process.exitCode = out.ok ? 0 : 1;
} catch (e) {
	process.stdout.write(
		JSON.stringify({ ok: false, error: String(e?.stack ?? e), status: e?.statusCode ?? null, requests }) + "\n",
	);
	process.exitCode = 1;
}
