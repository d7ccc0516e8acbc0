// The provider's REST API (docs/api.md), at <Airflow's base URL>quota/api, with the UI's session cookie.

/** Airflow's base path as its UI's <base href> gives it, ending in "/": "/" or "/some/prefix/". */
export const airflowBase = (): string => new URL(".", document.baseURI).pathname;

export const apiBase = (): string => `${airflowBase()}quota/api`;

/** A refused request, with its HTTP status (401: the session ended). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

type Params = Record<string, string | number | boolean | null | undefined | string[]>;

export function query(params: Params): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) search.append(name, String(one));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** GET a path of the API; `allowed` statuses answer null instead of throwing. */
export async function get<T>(path: string, allowed: number[] = []): Promise<T | null> {
  const response = await fetch(apiBase() + path, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (allowed.includes(response.status)) return null;
  if (!response.ok) throw new HttpError(response.status, `${response.status} ${response.statusText} for ${path}`);
  return (await response.json()) as T;
}

export async function must<T>(path: string): Promise<T> {
  return (await get<T>(path)) as T;
}

/** Airflow's own login, which comes back to `next` (what Airflow's UI does on a 401). */
export const loginUrl = (): string =>
  `${airflowBase()}api/v2/auth/login${query({ next: globalThis.location.href })}`;
