import { Breadcrumb, Space, Typography } from 'antd';
import type { ReactNode } from 'react';
import { Link } from 'react-router-dom';

/** A page's heading, optional breadcrumbs and actions on the right. */
export default function PageTitle({
  title,
  crumbs,
  extra,
  sub,
}: {
  title: ReactNode;
  crumbs?: Array<{ label: ReactNode; to?: string }>;
  extra?: ReactNode;
  sub?: ReactNode;
}) {
  return (
    <div className="page-title">
      {crumbs && (
        <Breadcrumb
          items={crumbs.map((c) => ({ title: c.to ? <Link to={c.to}>{c.label}</Link> : c.label }))}
        />
      )}
      <div className="page-title-row">
        <div>
          <Typography.Title level={3} style={{ margin: 0 }}>
            {title}
          </Typography.Title>
          {sub && <Typography.Text type="secondary">{sub}</Typography.Text>}
        </div>
        {extra && <Space wrap>{extra}</Space>}
      </div>
    </div>
  );
}
