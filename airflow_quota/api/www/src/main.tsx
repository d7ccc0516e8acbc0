// The GPU Quotas page in Airflow's UI (the plugin's react_apps): the whole page in the navigation, or a task
// instance's "Quota" tab when Airflow passes the task instance (its route's dagId, runId, taskId, mapIndex).
// It draws with the host's React, React Router and Chakra UI (Airflow's theme tokens, light or dark mode).
import { ChakraProvider, type SystemContext } from "@chakra-ui/react";

import { QueuesPage } from "./QueuesPage";
import { TaskView } from "./TaskView";

export type PluginProps = { dagId?: string; runId?: string; taskId?: string; mapIndex?: string };

declare global {
  var ChakraUISystem: SystemContext | undefined;
}

const QuotaPlugin = ({ dagId, runId, taskId, mapIndex }: PluginProps) => {
  const page = dagId && runId && taskId
    ? <TaskView dagId={dagId} runId={runId} taskId={taskId} mapIndex={mapIndex ?? "-1"} />
    : <QueuesPage />;
  // Airflow's own Chakra system (its theme), as Airflow's UI shares it with plugins.
  const system = globalThis.ChakraUISystem;
  return system ? <ChakraProvider value={system}>{page}</ChakraProvider> : page;
};

export default QuotaPlugin;
