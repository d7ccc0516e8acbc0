// Keeping the page fresh, and following Airflow's colour mode.
import { useCallback, useEffect, useRef, useState } from "react";

/** Airflow's colour mode: its UI marks <html> "dark" or "light" (next-themes). */
export function useDarkMode(): boolean {
  const read = () => document.documentElement.classList.contains("dark");
  const [dark, setDark] = useState(read);
  useEffect(() => {
    const observer = new MutationObserver(() => setDark(read()));
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ["class"] });
    return () => observer.disconnect();
  }, []);
  return dark;
}

export type Poll<T> = { data: T | null; error: unknown; updatedAt: number | null; refresh: () => void };

/** Calls `load` now, every `everyMs` (not while a load is under way) and at once whenever `key` changes; keeps
 * the last answer. An answer asked under an older key is dropped (the user changed a filter meanwhile). */
export function usePoll<T>(load: () => Promise<T>, key: string, everyMs = 5000): Poll<T> {
  const [state, setState] = useState<{ data: T | null; error: unknown; updatedAt: number | null }>({
    data: null,
    error: null,
    updatedAt: null,
  });
  const loadRef = useRef(load);
  loadRef.current = load;
  const keyRef = useRef(key);
  keyRef.current = key;
  const busy = useRef<string | null>(null);
  const refresh = useCallback((force = true) => {
    const asked = keyRef.current;
    if (!force && busy.current === asked) return;
    busy.current = asked;
    loadRef.current().then(
      (data) => {
        if (busy.current === asked) busy.current = null;
        if (asked === keyRef.current) setState({ data, error: null, updatedAt: Date.now() });
      },
      (error: unknown) => {
        if (busy.current === asked) busy.current = null;
        if (asked === keyRef.current) setState((old) => ({ ...old, error }));
      },
    );
  }, []);
  useEffect(() => {
    refresh(true);
    const timer = setInterval(() => refresh(false), everyMs);
    return () => clearInterval(timer);
  }, [key, everyMs, refresh]);
  return { ...state, refresh: () => refresh(true) };
}
