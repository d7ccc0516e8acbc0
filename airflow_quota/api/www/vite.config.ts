// The GPU Quotas page as a library build: one UMD file, ../static/app/main.umd.cjs, that Airflow's UI loads
// for the plugin's react_apps (it sets globalThis.AirflowPlugin to the page's component). React, React DOM,
// React Router, Chakra UI and Emotion are the host's own (Airflow's UI puts them on globalThis), so the page
// draws with Airflow's Chakra system and theme, light or dark; ECharts (the GPU timeline) is bundled.
import react from "@vitejs/plugin-react";
import { resolve } from "node:path";
import { defineConfig } from "vite";

const HOST_GLOBALS: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "react-router-dom": "ReactRouterDOM",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

export default defineConfig({
  plugins: [react({ jsxRuntime: "automatic" })],
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: resolve(__dirname, "../static/app"),
    emptyOutDir: true,
    chunkSizeWarningLimit: 2000,
    lib: {
      entry: resolve(__dirname, "src/main.tsx"),
      fileName: () => "main.umd.cjs",
      formats: ["umd"],
      name: "AirflowPlugin",
    },
    rollupOptions: {
      external: Object.keys(HOST_GLOBALS),
      output: { globals: HOST_GLOBALS },
    },
  },
});
