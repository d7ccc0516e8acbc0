// The GPU Quotas page in Airflow's UI (the plugin's react_apps): the whole page in the navigation, or a task
// instance's "Quota" view when Airflow passes the task instance (its route's dagId, runId, taskId, mapIndex).
import { Box, Heading } from "@chakra-ui/react";

export type PluginProps = { dagId?: string; runId?: string; taskId?: string; mapIndex?: string };

const QuotaPlugin = ({ dagId, runId, taskId, mapIndex }: PluginProps) => (
  <Box p={2} data-quota-page={taskId ? "task" : "queues"}>
    <Heading size="lg">{taskId ? `Quota: ${taskId}` : "GPU Quotas"}</Heading>
    {dagId} {runId} {mapIndex}
  </Box>
);

export default QuotaPlugin;
