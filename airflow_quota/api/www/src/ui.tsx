// Small pieces the page's views share: tables, badges, the status line, notes, the error box.
import { Badge, Box, Code, Flex, Heading, Link, Table, Text } from "@chakra-ui/react";
import type { ReactNode } from "react";

import { HttpError, loginUrl } from "./api";
import { clock } from "./format";

const STATUS_COLORS: Record<string, string> = {
  RUNNING: "cyan", SCHEDULED: "blue", STARTING: "blue", RUNNABLE: "gray", SUBMITTED: "gray", SUCCEEDED: "green",
  FAILED: "red", GRANTED: "green", PREEMPTED: "red", REQUEUED: "orange", TERMINATED: "red", WAITING: "gray",
  stopping: "red", CONFIG_CHANGED: "purple", PRIORITY_CHANGED: "purple", HANDED_OVER: "teal",
};

export const StatusBadge = ({ value, className }: { value: string; className?: string }) => (
  <Badge className={`badge ${value} ${className ?? ""}`} colorPalette={STATUS_COLORS[value] ?? "gray"} variant="subtle">
    {value}
  </Badge>
);

export const Swatch = ({ color }: { color: string }) => (
  <Box as="span" className="swatch" display="inline-block" width="10px" height="10px" borderRadius="2px" mr={1.5}
    style={{ background: color }} />
);

export type Column = { header: string; numeric?: boolean };

export function DataTable({ className, columns, children, empty, scheduler }: {
  className: string;
  columns: Column[];
  children: ReactNode[];
  empty?: string;
  scheduler?: string;
}) {
  return (
    <Box overflowX="auto" mb={1}>
      <Table.Root className={className} size="sm" variant="outline" data-scheduler={scheduler}>
        <Table.Header>
          <Table.Row>
            {columns.map((column) => (
              <Table.ColumnHeader key={column.header} textAlign={column.numeric ? "end" : "start"}>
                {column.header}
              </Table.ColumnHeader>
            ))}
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {children.length ? children : (
            <Table.Row>
              <Table.Cell colSpan={columns.length} color="fg.muted">{empty ?? "None."}</Table.Cell>
            </Table.Row>
          )}
        </Table.Body>
      </Table.Root>
    </Box>
  );
}

/** "Times in UTC", under a table only when it shows times. */
export const UtcNote = ({ show }: { show: boolean }) =>
  show ? <Text className="utc-note" fontSize="xs" color="fg.muted" mb={3}>Times in UTC.</Text> : null;

export const SectionHeading = ({ children, level = 2 }: { children: ReactNode; level?: 2 | 3 }) => (
  <Heading as={level === 2 ? "h2" : "h3"} size={level === 2 ? "lg" : "md"} mt={level === 2 ? 6 : 4} mb={2}>
    {children}
  </Heading>
);

/** The page's header: its title, when it last refreshed, and what went wrong (a 401: log in again). */
export function PageHeader({ title, updatedAt, error, extra }: {
  title: string;
  updatedAt: number | null;
  error: unknown;
  extra?: string;
}) {
  return (
    <Box mb={3}>
      <Flex align="baseline" gap={3} wrap="wrap">
        <Heading as="h1" id="title" size="xl">{title}</Heading>
        <Text id="status" color="fg.muted" fontSize="sm">
          {updatedAt === null ? "Loading…" : `Updated ${clock(updatedAt)} UTC · refreshes every 5 s${extra ? ` · ${extra}` : ""}`}
        </Text>
      </Flex>
      {error ? (
        <Box id="error" className="error" role="alert" mt={2} p={2} borderRadius="md" bg="bg.error" color="fg.error">
          {error instanceof HttpError && error.status === 401 ? (
            <>Your session has ended: <Link href={loginUrl()} color="fg.info">log in again</Link>.</>
          ) : (
            `Could not refresh (${error instanceof Error ? error.message : String(error)}); retrying.`
          )}
        </Box>
      ) : null}
    </Box>
  );
}

export const ErrorBox = ({ children }: { children: ReactNode }) => (
  <Box className="error" role="alert" my={2} p={2} borderRadius="md" bg="bg.error" color="fg.error">{children}</Box>
);

export { Code };
